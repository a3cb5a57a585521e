package dev.lakemv.spark;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.LocalTableScanExec;
import org.apache.spark.sql.execution.SQLExecution$;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.arrow.ArrowConverters$;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction0;
import scala.runtime.AbstractPartialFunction;

/**
 * A physical plan run again over new rows: a view's recompute planned once (parsed, analysed,
 * optimised, planned) and run batch after batch with each batch's rows in place of the first's.
 *
 * <p>Each input of the plan is a local relation with a marker column of its own (a name starting
 * with the marker prefix). {@link #swap} copies the plan with the rows of each marked local scan
 * replaced; every node above a replaced scan is a new node, so no shuffle, subquery result or
 * generated code of an earlier run is reused for the new rows. The plan must be made with the rules
 * that fold a local relation's rows into the plan switched off (see lakemv.spark.views.kept).
 */
public final class Replan {
  private Replan() {}

  /** The rows of a Dataset made from local data (createDataFrame), or null if it is not one relation. */
  public static Object localRows(Dataset<?> frame) {
    LogicalPlan plan = frame.queryExecution().analyzed();
    return plan instanceof LocalRelation relation ? relation.data() : null;
  }

  /**
   * The rows `frame` computes, collected into the driver's JVM as a local relation's data (to swap into
   * a kept plan: see swap): the rows of a batch's gathers reach a view's plan without passing through
   * Python.
   */
  public static Object collectedRows(Dataset<?> frame) {
    InternalRow[] rows = frame.queryExecution().executedPlan().executeCollect();
    return scala.jdk.javaapi.CollectionConverters.asScala(java.util.Arrays.asList(rows)).toList();
  }

  /**
   * `plan` with each marked local scan reading `rows.get(marker)` as one partition that says so, and
   * every shuffle whose input is then one partition dropped: a batch's few rows of a view run in one
   * task, with no shuffle stage (a hundred views' plans each had several: one stage each).
   */
  @SuppressWarnings("unchecked")
  public static SparkPlan swapSingle(SparkSession session, SparkPlan plan, String prefix, Map<String, Object> rows) {
    SparkPlan swapped =
        plan.transformUpWithSubqueries(
            new AbstractPartialFunction<SparkPlan, SparkPlan>() {
              @Override
              public boolean isDefinedAt(SparkPlan node) {
                return input(node, prefix);
              }

              @Override
              public SparkPlan apply(SparkPlan node) {
                Object fresh = rows.get(marker(node, prefix));
                if (fresh == null) {
                  throw new IllegalArgumentException("no rows for the input " + node.output());
                }
                org.apache.spark.rdd.RDD<InternalRow> one =
                    fresh instanceof org.apache.spark.rdd.RDD<?> rdd
                        ? (org.apache.spark.rdd.RDD<InternalRow>) rdd
                        : session.sparkContext().parallelize((Seq<InternalRow>) fresh, 1, scala.reflect.ClassTag$.MODULE$.apply(InternalRow.class));
                return new org.apache.spark.sql.execution.RDDScanExec(
                    node.output(), one, "batch", org.apache.spark.sql.catalyst.plans.physical.SinglePartition$.MODULE$,
                    scala.collection.immutable.List$.MODULE$.empty(), scala.Option.empty());
              }
            });
    return swapped.transformUp(
        new AbstractPartialFunction<SparkPlan, SparkPlan>() {
          @Override
          public boolean isDefinedAt(SparkPlan node) {
            return node instanceof org.apache.spark.sql.execution.exchange.ShuffleExchangeExec exchange
                && exchange.child().outputPartitioning().numPartitions() == 1;
          }

          @Override
          public SparkPlan apply(SparkPlan node) {
            return ((org.apache.spark.sql.execution.exchange.ShuffleExchangeExec) node).child();
          }
        });
  }

  /**
   * The rows of every plan in `plans` (one schema: `schema`, in DDL) as one Dataset: plan i swapped (see
   * {@link #swapSingle}) to read, for each input, partition `ids.get(i)` of that input's rows in
   * `shuffled` (see {@link #byLabel}). One call for a batch's views, not a few calls into the JVM a view.
   */
  public static Dataset<Row> swapAll(
      SparkSession session, List<SparkPlan> plans, List<Integer> ids, String prefix,
      Map<String, org.apache.spark.rdd.RDD<InternalRow>> shuffled, String schema) {
    // each plan copied and made into its RDD on the driver (its code generated: about 10 ms a view)
    // side by side on the driver's cores: the executors wait for the plans
    int threads = Math.max(1, Math.min(Runtime.getRuntime().availableProcessors(), plans.size()));
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(threads);
    java.util.List<java.util.concurrent.Future<org.apache.spark.rdd.RDD<InternalRow>>> made = new java.util.ArrayList<>();
    try {
      for (int i = 0; i < plans.size(); i++) {
        Map<String, Object> rows = new java.util.HashMap<>();
        for (Map.Entry<String, org.apache.spark.rdd.RDD<InternalRow>> input : shuffled.entrySet()) {
          rows.put(input.getKey(), partition(input.getValue(), ids.get(i)));
        }
        SparkPlan plan = plans.get(i);
        java.util.Properties local = new java.util.Properties();  // a copy: each thread's RDD scopes are its own
        java.util.Properties caller = session.sparkContext().getLocalProperties();
        for (String name : caller.stringPropertyNames()) {
          local.setProperty(name, caller.getProperty(name));
        }
        made.add(
            pool.submit(
                () -> {
                  // the caller's session (its SQL conf) and job properties, as on the calling thread
                  org.apache.spark.sql.SparkSession.setActiveSession(session);
                  session.sparkContext().setLocalProperties(local);
                  return swapSingle(session, plan, prefix, rows).execute();
                }));
      }
      java.util.List<org.apache.spark.rdd.RDD<InternalRow>> rdds = new java.util.ArrayList<>();
      for (java.util.concurrent.Future<org.apache.spark.rdd.RDD<InternalRow>> one : made) {
        rdds.add(one.get());
      }
      return unionOf(session, rdds, schema);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while the views' plans were made", e);
    } catch (java.util.concurrent.ExecutionException e) {
      throw e.getCause() instanceof RuntimeException thrown ? thrown : new IllegalStateException(e.getCause());
    } finally {
      pool.shutdownNow();
    }
  }

  private static Dataset<Row> unionOf(SparkSession session, java.util.List<org.apache.spark.rdd.RDD<InternalRow>> rdds, String schema) {
    org.apache.spark.rdd.RDD<InternalRow> all =
        session.sparkContext().union(CollectionConverters.asScala(rdds).toSeq(), scala.reflect.ClassTag$.MODULE$.apply(InternalRow.class));
    return session.internalCreateDataFrame(all, StructType.fromDDL(schema), false);
  }

  /**
   * `frame`'s logical plan as a Dataset of `session` (another session of the same context, with its own
   * SQL conf): planned again there, e.g. without adaptive execution, so its shuffles stay stages of the
   * job that reads it instead of running when its RDD is made.
   */
  public static Dataset<Row> inSession(SparkSession session, Dataset<?> frame) {
    return Dataset.ofRows(session, frame.queryExecution().analyzed());
  }

  /**
   * The rows `frame` computes, shuffled by the int in column `label` into `labels` partitions: the rows
   * labelled i in partition i (labels are 0 .. labels - 1). Every view's rows of a batch reach its plan
   * this way, on the executors, each view reading only its own partition (see {@link #partition}).
   */
  public static org.apache.spark.rdd.RDD<InternalRow> byLabel(Dataset<?> frame, int label, int labels) {
    StructType schema = frame.schema();
    org.apache.spark.rdd.RDD<Tuple2<Integer, InternalRow>> keyed =
        frame.queryExecution().toRdd().toJavaRDD().mapToPair(new Labelled(label, schema)).rdd();
    scala.reflect.ClassTag<Integer> intTag = scala.reflect.ClassTag$.MODULE$.apply(Integer.class);
    scala.reflect.ClassTag<InternalRow> rowTag = scala.reflect.ClassTag$.MODULE$.apply(InternalRow.class);
    org.apache.spark.rdd.ShuffledRDD<Integer, InternalRow, InternalRow> shuffled =
        new org.apache.spark.rdd.ShuffledRDD<>(keyed, new org.apache.spark.HashPartitioner(labels), intTag, rowTag, rowTag);
    // the rows travel as SQL's own shuffles carry them (their bytes), not through the context's Java
    // serialization: the label is the partition, so the key need not travel
    shuffled.setSerializer(new org.apache.spark.sql.execution.UnsafeRowSerializer(schema.size(), null));
    return new org.apache.spark.api.java.JavaPairRDD<>(shuffled, intTag, rowTag).values().rdd();
  }

  /**
   * The rows of all `frames` (one schema) as one Dataset over the union of their RDDs: each frame planned
   * once, alone, and no plan over them all for the analyzer to walk (a union built pairwise re-analyses
   * everything below it at each step: quadratic in the frames).
   */
  public static Dataset<Row> unionRows(SparkSession session, java.util.List<Dataset<Row>> frames) {
    for (Dataset<Row> frame : frames) {
      // every plan's broadcasts started first (a plan without adaptive execution starts them when
      // prepared and waits for them when its RDD is made): they run side by side, not plan after plan
      frame.queryExecution().executedPlan().prepare();
    }
    java.util.List<org.apache.spark.rdd.RDD<InternalRow>> rdds = new java.util.ArrayList<>();
    for (Dataset<Row> frame : frames) {
      rdds.add(frame.queryExecution().toRdd());
    }
    org.apache.spark.rdd.RDD<InternalRow> all =
        session.sparkContext().union(CollectionConverters.asScala(rdds).toSeq(), scala.reflect.ClassTag$.MODULE$.apply(InternalRow.class));
    return session.internalCreateDataFrame(all, frames.get(0).schema(), false);
  }

  /** Partition `index` of `rdd` alone, as an RDD of one partition (no copy: a narrow dependency). */
  public static org.apache.spark.rdd.RDD<InternalRow> partition(org.apache.spark.rdd.RDD<InternalRow> rdd, int index) {
    return org.apache.spark.rdd.PartitionPruningRDD.create(rdd, new Only(index));
  }

  private static final class Labelled implements org.apache.spark.api.java.function.PairFunction<InternalRow, Integer, InternalRow> {
    private final int column;
    private final StructType schema;
    private transient org.apache.spark.sql.catalyst.expressions.UnsafeProjection unsafe;

    Labelled(int column, StructType schema) {
      this.column = column;
      this.schema = schema;
    }

    @Override
    public Tuple2<Integer, InternalRow> call(InternalRow row) {
      // no copy of the (reused) row: a shuffle this serializer writes serializes each record as it comes
      // (bypass or serialized sort), never keeping it as an object
      if (!(row instanceof org.apache.spark.sql.catalyst.expressions.UnsafeRow)) {
        if (unsafe == null) {
          unsafe = org.apache.spark.sql.catalyst.expressions.UnsafeProjection.create(schema);
        }
        row = unsafe.apply(row);
      }
      return new Tuple2<>(row.getInt(column), row);
    }
  }

  private static final class Only extends scala.runtime.AbstractFunction1<Object, Object> implements java.io.Serializable {
    private final int index;

    Only(int index) {
      this.index = index;
    }

    @Override
    public Object apply(Object partition) {
      return (Integer) partition == index;
    }
  }

  /**
   * Whether `node` is a marked input: a local scan, or a scan of an RDD (an input planned empty is made
   * from an empty RDD: a relation of known size, such as an empty local one, lets the optimizer drop an
   * aggregate, a sort or a limit it proves needless for that size: OptimizeOneRowPlan, EliminateLimits).
   */
  private static boolean input(SparkPlan node, String prefix) {
    return (node instanceof LocalTableScanExec || node instanceof org.apache.spark.sql.execution.RDDScanExec)
        && marker(node, prefix) != null;
  }

  /** The marker of a local scan's output: its column whose name starts with `prefix`, else null. */
  private static String marker(SparkPlan scan, String prefix) {
    Iterator<Attribute> columns = scan.output().iterator();
    while (columns.hasNext()) {
      String name = columns.next().name();
      if (name.startsWith(prefix)) {
        return name;
      }
    }
    return null;
  }

  /**
   * Whether every leaf of `plan` (in its subqueries too) is a scan of a marked input: no rows of the
   * run that planned it stay in the plan (a folded relation, a scan of an RDD, a VALUES list).
   */
  public static boolean marked(SparkPlan plan, String prefix) {
    boolean[] all = {true};
    plan.foreachWithSubqueries(
        new scala.runtime.AbstractFunction1<SparkPlan, scala.runtime.BoxedUnit>() {
          @Override
          public scala.runtime.BoxedUnit apply(SparkPlan node) {
            if (node.children().isEmpty()
                && !input(node, prefix)) {
              all[0] = false;
            }
            return scala.runtime.BoxedUnit.UNIT;
          }
        });
    return all[0];
  }

  /** `plan` with each marked local scan reading no rows: the plan kept, holding none of a batch's rows. */
  public static SparkPlan strip(SparkPlan plan, String prefix) {
    return replace(plan, prefix, null);
  }

  /** The rows the local scans of `plan` (its subqueries too) hold. */
  public static long rowsHeld(SparkPlan plan) {
    long[] rows = {0};
    plan.foreachWithSubqueries(
        new scala.runtime.AbstractFunction1<SparkPlan, scala.runtime.BoxedUnit>() {
          @Override
          public scala.runtime.BoxedUnit apply(SparkPlan node) {
            if (node instanceof LocalTableScanExec scan) {
              rows[0] += scan.rows().size();
            }
            return scala.runtime.BoxedUnit.UNIT;
          }
        });
    return rows[0];
  }

  /** `plan` with each marked local scan reading `rows.get(marker)` (a relation's data, see localRows). */
  public static SparkPlan swap(SparkPlan plan, String prefix, Map<String, Object> rows) {
    return replace(plan, prefix, rows);
  }

  /** `plan` with each marked local scan reading its rows in `rows`, or none when `rows` is null. */
  private static SparkPlan replace(SparkPlan plan, String prefix, Map<String, Object> rows) {
    return plan.transformUpWithSubqueries(
        new AbstractPartialFunction<SparkPlan, SparkPlan>() {
          @Override
          public boolean isDefinedAt(SparkPlan node) {
            return node instanceof LocalTableScanExec;
          }

          @Override
          @SuppressWarnings("unchecked")
          public SparkPlan apply(SparkPlan node) {
            LocalTableScanExec scan = (LocalTableScanExec) node;
            if (rows == null) {
              return new LocalTableScanExec(
                  scan.output(), scala.collection.immutable.List$.MODULE$.empty(), scan.stream());
            }
            Object fresh = rows.get(marker(scan, prefix));
            if (fresh == null) {
              throw new IllegalArgumentException("no rows for the local scan " + scan.output());
            }
            return new LocalTableScanExec(scan.output(), (Seq<InternalRow>) fresh, scan.stream());
          }
        });
  }

  /**
   * What each of `plans` computes, in one Spark job: the plans' RDDs side by side in one union,
   * read by one task (each task of a union's stage would deserialize every plan's lineage), each
   * plan's rows as Arrow IPC streams. Framed for one transfer to Python, per plan in order: its
   * schema as JSON, then its streams (none when it has no rows); every string and stream is a
   * big-endian int length and its bytes, and a plan's streams are preceded by their count.
   */
  public static byte[] collectArrow(SparkSession session, List<SparkPlan> plans) {
    SQLConf conf = session.sessionState().conf();
    String zone = conf.sessionLocalTimeZone();
    boolean large = conf.arrowUseLargeVarTypes();
    long records = conf.arrowMaxRecordsPerBatch();
    List<JavaRDD<Tuple2<Integer, byte[]>>> parts = new ArrayList<>();
    for (int i = 0; i < plans.size(); i++) {
      SparkPlan plan = plans.get(i);
      parts.add(plan.execute().toJavaRDD().mapPartitions(new ToArrow(i, plan.schema(), zone, large, records)));
    }
    JavaSparkContext context = JavaSparkContext.fromSparkContext(session.sparkContext());
    @SuppressWarnings("unchecked")
    JavaRDD<Tuple2<Integer, byte[]>>[] all = parts.toArray(new JavaRDD[0]);
    List<Tuple2<Integer, byte[]>> found =
        SQLExecution$.MODULE$.withSQLConfPropagated(  // the tasks see the session's SQL conf
            session,
            new AbstractFunction0<List<Tuple2<Integer, byte[]>>>() {
              @Override
              public List<Tuple2<Integer, byte[]>> apply() {
                return context.union(all).coalesce(1).collect();
              }
            });
    List<List<byte[]>> streams = new ArrayList<>();
    for (int i = 0; i < plans.size(); i++) {
      streams.add(new ArrayList<>());
    }
    for (Tuple2<Integer, byte[]> stream : found) {
      streams.get(stream._1()).add(stream._2());
    }
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      for (int i = 0; i < plans.size(); i++) {
        byte[] schema = plans.get(i).schema().json().getBytes(StandardCharsets.UTF_8);
        out.writeInt(schema.length);
        out.write(schema);
        out.writeInt(streams.get(i).size());
        for (byte[] stream : streams.get(i)) {
          out.writeInt(stream.length);
          out.write(stream);
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  /** A partition's rows as Arrow IPC streams (schema and batch each), tagged with their plan's index. */
  private static final class ToArrow implements FlatMapFunction<java.util.Iterator<InternalRow>, Tuple2<Integer, byte[]>> {
    private final int index;
    private final StructType schema;
    private final String zone;
    private final boolean large;
    private final long records;

    ToArrow(int index, StructType schema, String zone, boolean large, long records) {
      this.index = index;
      this.schema = schema;
      this.zone = zone;
      this.large = large;
      this.records = records;
    }

    @Override
    public java.util.Iterator<Tuple2<Integer, byte[]>> call(java.util.Iterator<InternalRow> rows) {
      if (!rows.hasNext()) {
        return java.util.Collections.emptyIterator();
      }
      scala.collection.Iterator<byte[]> batches =
          ArrowConverters$.MODULE$.toBatchWithSchemaIterator(
              CollectionConverters.asScala(rows), schema, records, Long.MAX_VALUE, zone, true, large);
      java.util.Iterator<byte[]> each = CollectionConverters.asJava(batches);
      return new java.util.Iterator<>() {
        @Override
        public boolean hasNext() {
          return each.hasNext();
        }

        @Override
        public Tuple2<Integer, byte[]> next() {
          return new Tuple2<>(index, each.next());
        }
      };
    }
  }
}
