package dev.lakemv.state;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.ReadStateStore;
import org.apache.spark.sql.execution.streaming.state.ReadStateStoreRDD;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreCoordinatorRef;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.StateStoreRDD;
import org.apache.spark.sql.execution.streaming.state.StateStoreThreadLocalTracker;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction2;

/**
 * lakemv's indexed state in Spark's state stores, partitioned by key over the executors.
 *
 * <p>One store holds every index: its key is {@code (space int, a binary, b binary)}, its value
 * {@code (v binary)}. A space is one index (a table's rows by primary key, a table's rows by a join
 * column, a view's rows by key); {@code a} is what the index is looked up by, {@code b} tells entries
 * with the same {@code a} apart (empty for a unique index). Entries with the same {@code (space, a)}
 * live in one partition of {@link #partitions}, fixed when the state is made: the requests of a
 * round are shuffled by {@code (space, a)} into the same partitions, and each partition reads or
 * writes its store there. Versions follow the caller's sequence: {@link #update} at version N writes
 * N+1, and a replay at N rewrites the same N+1. Python composes the rounds; this class only moves rows.
 */
public final class KeyedState implements Serializable {
  private static final long serialVersionUID = 1L;

  public static final StructType KEY =
      new StructType()
          .add("space", DataTypes.IntegerType, false)
          .add("a", DataTypes.BinaryType, false)
          .add("b", DataTypes.BinaryType, false);
  /** An entry's value and its order (`s`: the source position of the row it holds; null: unordered). */
  public static final StructType VALUE =
      new StructType().add("v", DataTypes.BinaryType, true).add("s", DataTypes.LongType, true);
  private static final StructType PREFIX =
      new StructType().add("space", DataTypes.IntegerType, false).add("a", DataTypes.BinaryType, false);
  private static final byte[] NONE = new byte[0];

  private final String checkpoint;
  private final UUID runId;
  private final long operator;
  private final int partitions;

  public KeyedState(String checkpoint, String runId, long operator, int partitions) {
    this.checkpoint = checkpoint;
    this.runId = UUID.fromString(runId);
    this.operator = operator;
    this.partitions = partitions;
  }

  public int partitions() {
    return partitions;
  }

  /**
   * A read store stays in a thread-local of the task's thread (Spark's, for a later write in the same
   * task to take over); a pooled thread's next task must not find it there. Spark's own wrapper
   * (mapPartitionsWithReadStateStore) clears it when the task ends: so does every read here.
   */
  private static void clearWhenDone() {
    TaskContext task = TaskContext.get();
    if (task != null) {
      task.addTaskCompletionListener(new org.apache.spark.util.TaskCompletionListener() {
        @Override
        public void onTaskCompletion(TaskContext context) {
          StateStoreThreadLocalTracker.clearStore();
        }
      });
    }
  }

  private static ClassTag<InternalRow> rows() {
    return ClassTag$.MODULE$.apply(InternalRow.class);
  }

  private static Option<StateStoreCoordinatorRef> coordinator(SparkSession spark) {
    return Option.apply(spark.streams().stateStoreCoordinator());
  }

  /**
   * The rows of `frame`, shuffled by (space, a) into the state's partitions; as they are when they are
   * placed so already (a grouping by (space, a) into as many partitions hashes them the same way).
   */
  private RDD<InternalRow> placed(Dataset<Row> frame) {
    SparkPlan plan = frame.queryExecution().executedPlan();
    if (plan.outputPartitioning() instanceof HashPartitioning hashed && hashed.numPartitions() == partitions) {
      List<Expression> by = CollectionConverters.asJava(hashed.expressions());
      if (by.size() == 2
          && by.get(0) instanceof Attribute first
          && by.get(1) instanceof Attribute second
          && first.name().equals("space")
          && second.name().equals("a")) {
        return frame.queryExecution().toRdd();
      }
    }
    Column[] by = {functions.col("space"), functions.col("a")};
    return ((Dataset<Row>) frame.repartition(partitions, by)).queryExecution().toRdd();
  }

  private static Dataset<Row> frame(SparkSession spark, RDD<InternalRow> rdd, StructType schema) {
    return spark.internalCreateDataFrame(rdd, schema, false);
  }

  /**
   * Every entry whose (space, a) a request names, at version `version`: the request's columns
   * (space int, a binary, tag binary: the caller's, carried through) and the entry's b and v. A
   * request no entry matches gives one row with b and v null; one whose a is null asks nothing (no
   * row). A repeated request is answered once, and requests of the same (space, a) with different
   * tags scan the store once.
   */
  public Dataset<Row> lookup(SparkSession spark, Dataset<Row> requests, long version) {
    return lookup(spark, requests, version, false);
  }

  /**
   * {@link #lookup}, or with `grouped` one row per entry found (space, a, tags, b, v): `tags` every
   * distinct tag the requests of its (space, a) carried (array of binary), so what reads the entry's
   * value (a parse) reads it once however many requests asked for it.
   */
  public Dataset<Row> lookup(SparkSession spark, Dataset<Row> requests, long version, boolean grouped) {
    Dataset<Row> asked = (Dataset<Row>) requests.select("space", "a", "tag");
    StructType out =
        new StructType()
            .add("space", DataTypes.IntegerType, false)
            .add("a", DataTypes.BinaryType, false)
            .add(grouped ? "tags" : "tag", grouped ? DataTypes.createArrayType(DataTypes.BinaryType) : DataTypes.BinaryType, true)
            .add("b", DataTypes.BinaryType, true)
            .add("v", DataTypes.BinaryType, true);
    RDD<InternalRow> found =
        new ReadStateStoreRDD<InternalRow, InternalRow>(
            placed(asked),
            new Look(grouped),
            checkpoint,
            runId,
            operator,
            version,
            Option.empty(),
            Option.empty(),
            KEY,
            VALUE,
            new PrefixKeyScanStateEncoderSpec(KEY, 2),
            spark.sessionState(),
            coordinator(spark),
            false,
            scala.collection.immutable.Map$.MODULE$.empty(),
            rows(),
            rows());
    return frame(spark, found, out);
  }

  /**
   * Writes `changes` (space int, a binary, b binary, v binary: null deletes the entry; and, when the
   * frame has it, s bigint: the change's order) over version `version` and commits version+1; gives each
   * change with the value it replaced (`old`, null when there was none). An ordered change (s not null)
   * older than the entry's order is not written: it gives the entry's value as both v and old. An
   * ordered delete keeps a tombstone (v null, its order), so an older change cannot bring the row back.
   * A change with p true (when the frame has p boolean) whose v begins the stored value is not written:
   * the entry keeps what it holds after it (a view row's digest, then its place), and gives it as v and old.
   */
  public Dataset<Row> update(SparkSession spark, Dataset<Row> changes, long version) {
    return update(spark, changes, version, false);
  }

  /**
   * {@link #update(SparkSession, Dataset, long)}, or with {@code blind} a write that does not read the
   * entry it replaces: each change is put or deleted as it is (no order, no kept prefix: a frame with s
   * or p is refused) and gives {@code old} null. For writes whose caller never reads what they replaced
   * (an index's moves): a read of the store per change was most of a large write's time.
   */
  public Dataset<Row> update(SparkSession spark, Dataset<Row> changes, long version, boolean blind) {
    java.util.List<String> columns = java.util.Arrays.asList(changes.columns());
    if (blind && (columns.contains("s") || columns.contains("p"))) {
      throw new IllegalArgumentException("a blind write has no order (s) and keeps no prefix (p)");
    }
    Column order =
        columns.contains("s")
            ? functions.col("s").cast(DataTypes.LongType)
            : functions.lit(null).cast(DataTypes.LongType).as("s");
    Column kept =
        columns.contains("p")
            ? functions.coalesce(functions.col("p").cast(DataTypes.BooleanType), functions.lit(false)).as("p")
            : functions.lit(false).as("p");
    Dataset<Row> asked =
        (Dataset<Row>) changes.select(functions.col("space"), functions.col("a"), functions.col("b"), functions.col("v"), order, kept);
    StructType out =
        new StructType()
            .add("space", DataTypes.IntegerType, false)
            .add("a", DataTypes.BinaryType, false)
            .add("b", DataTypes.BinaryType, false)
            .add("v", DataTypes.BinaryType, true)
            .add("old", DataTypes.BinaryType, true);
    RDD<InternalRow> written =
        new StateStoreRDD<InternalRow, InternalRow>(
            placed(asked),
            new Write(blind),
            checkpoint,
            runId,
            operator,
            version,
            Option.empty(),
            Option.empty(),
            KEY,
            VALUE,
            new PrefixKeyScanStateEncoderSpec(KEY, 2),
            spark.sessionState(),
            coordinator(spark),
            false,
            scala.collection.immutable.Map$.MODULE$.empty(),
            false,
            rows(),
            rows());
    return frame(spark, written, out);
  }

  /**
   * One round of writes and reads over version `version`, committing version+1: each partition applies
   * its writes first, then answers its reads, so a read sees every write of the round. `ops` is
   * (space int, a binary, b binary, v binary, tag binary, read boolean). A write (read false) puts v at
   * (space, a, b), or deletes it when v is null, and gives (false, space, a, b, v, old: the value it
   * replaced, tag). A read gives every entry under (space, a): (true, space, a, b, v, null, tag), or
   * one row with b and v null when there is none.
   */
  public Dataset<Row> round(SparkSession spark, Dataset<Row> ops, long version) {
    Dataset<Row> asked = (Dataset<Row>) ops.select("space", "a", "b", "v", "tag", "read");
    StructType out =
        new StructType()
            .add("read", DataTypes.BooleanType, false)
            .add("space", DataTypes.IntegerType, false)
            .add("a", DataTypes.BinaryType, false)
            .add("b", DataTypes.BinaryType, true)
            .add("v", DataTypes.BinaryType, true)
            .add("old", DataTypes.BinaryType, true)
            .add("tag", DataTypes.BinaryType, true);
    RDD<InternalRow> done =
        new StateStoreRDD<InternalRow, InternalRow>(
            placed(asked),
            new Round(),
            checkpoint,
            runId,
            operator,
            version,
            Option.empty(),
            Option.empty(),
            KEY,
            VALUE,
            new PrefixKeyScanStateEncoderSpec(KEY, 2),
            spark.sessionState(),
            coordinator(spark),
            false,
            scala.collection.immutable.Map$.MODULE$.empty(),
            false,
            rows(),
            rows());
    return frame(spark, done, out);
  }

  /** Every entry at `version` (space, a, b, v), read where it lives: a full scan, for a view recomputed whole. */
  public Dataset<Row> scan(SparkSession spark, long version) {
    StructType none = new StructType().add("space", DataTypes.IntegerType, false).add("a", DataTypes.BinaryType, false).add("tag", DataTypes.BinaryType, true);
    Dataset<Row> empty = spark.internalCreateDataFrame(spark.sparkContext().emptyRDD(rows()), none, false);
    StructType out =
        new StructType()
            .add("space", DataTypes.IntegerType, false)
            .add("a", DataTypes.BinaryType, false)
            .add("b", DataTypes.BinaryType, false)
            .add("v", DataTypes.BinaryType, true);
    RDD<InternalRow> all =
        new ReadStateStoreRDD<InternalRow, InternalRow>(
            placed(empty),
            new Scan(),
            checkpoint,
            runId,
            operator,
            version,
            Option.empty(),
            Option.empty(),
            KEY,
            VALUE,
            new PrefixKeyScanStateEncoderSpec(KEY, 2),
            spark.sessionState(),
            coordinator(spark),
            false,
            scala.collection.immutable.Map$.MODULE$.empty(),
            rows(),
            rows());
    return frame(spark, all, out);
  }

  /** How many entries each space holds at `version` (a full scan: for tests and reports). */
  public Dataset<Row> count(SparkSession spark, long version) {
    StructType none = new StructType().add("space", DataTypes.IntegerType, false).add("a", DataTypes.BinaryType, false).add("tag", DataTypes.BinaryType, true);
    Dataset<Row> empty = spark.internalCreateDataFrame(spark.sparkContext().emptyRDD(rows()), none, false);
    StructType out = new StructType().add("space", DataTypes.IntegerType, false).add("entries", DataTypes.LongType, false);
    RDD<InternalRow> counted =
        new ReadStateStoreRDD<InternalRow, InternalRow>(
            placed(empty),
            new Count(),
            checkpoint,
            runId,
            operator,
            version,
            Option.empty(),
            Option.empty(),
            KEY,
            VALUE,
            new PrefixKeyScanStateEncoderSpec(KEY, 2),
            spark.sessionState(),
            coordinator(spark),
            false,
            scala.collection.immutable.Map$.MODULE$.empty(),
            rows(),
            rows());
    return (Dataset<Row>) frame(spark, counted, out).groupBy("space").sum("entries").toDF("space", "entries");
  }

  private static final class Look extends AbstractFunction2<ReadStateStore, Iterator<InternalRow>, Iterator<InternalRow>>
      implements Serializable {
    private static final long serialVersionUID = 1L;
    private final boolean grouped;

    Look(boolean grouped) {
      this.grouped = grouped;
    }

    @Override
    public Iterator<InternalRow> apply(ReadStateStore store, Iterator<InternalRow> requests) {
      clearWhenDone();
      UnsafeProjection prefix = UnsafeProjection.create(PREFIX);
      if (grouped) {
        return grouped(store, prefix, requests);
      }
      List<InternalRow> out = new ArrayList<>();
      java.util.Set<Asked> asked = new java.util.HashSet<>();  // a repeated request answered once
      java.util.Map<Asked, List<byte[][]>> read = new java.util.HashMap<>();  // (space, a) scanned once, whatever the tags
      while (requests.hasNext()) {
        InternalRow request = requests.next();
        if (request.isNullAt(1)) {  // asks nothing (a NULL compared where the link is not null-safe)
          continue;
        }
        int space = request.getInt(0);
        byte[] a = request.getBinary(1);
        byte[] tag = request.isNullAt(2) ? null : request.getBinary(2);
        if (!asked.add(new Asked(space, a, tag))) {
          continue;
        }
        List<byte[][]> entries = read.computeIfAbsent(new Asked(space, a, null), k -> scan(store, prefix, space, a));
        for (byte[][] entry : entries) {
          out.add(new GenericInternalRow(new Object[] {space, a, tag, entry[0], entry[1]}));
        }
        if (entries.isEmpty()) {
          out.add(new GenericInternalRow(new Object[] {space, a, tag, null, null}));
        }
      }
      return CollectionConverters.asScala(out.iterator());
    }

    /** Each (space, a) asked, scanned once: one row per entry, with every distinct tag that asked. */
    private static Iterator<InternalRow> grouped(ReadStateStore store, UnsafeProjection prefix, Iterator<InternalRow> requests) {
      java.util.Map<Asked, java.util.LinkedHashSet<Asked>> tags = new java.util.LinkedHashMap<>();
      while (requests.hasNext()) {
        InternalRow request = requests.next();
        if (request.isNullAt(1)) {
          continue;
        }
        int space = request.getInt(0);
        byte[] a = request.getBinary(1);
        byte[] tag = request.isNullAt(2) ? null : request.getBinary(2);
        tags.computeIfAbsent(new Asked(space, a, null), k -> new java.util.LinkedHashSet<>()).add(new Asked(0, NONE, tag));
      }
      List<InternalRow> out = new ArrayList<>();
      for (java.util.Map.Entry<Asked, java.util.LinkedHashSet<Asked>> e : tags.entrySet()) {
        Asked key = e.getKey();
        Object[] carried = new Object[e.getValue().size()];
        int i = 0;
        for (Asked t : e.getValue()) {
          carried[i++] = t.tag();
        }
        org.apache.spark.sql.catalyst.util.GenericArrayData array = new org.apache.spark.sql.catalyst.util.GenericArrayData(carried);
        List<byte[][]> entries = scan(store, prefix, key.space(), key.a());
        for (byte[][] entry : entries) {
          out.add(new GenericInternalRow(new Object[] {key.space(), key.a(), array, entry[0], entry[1]}));
        }
        if (entries.isEmpty()) {
          out.add(new GenericInternalRow(new Object[] {key.space(), key.a(), array, null, null}));
        }
      }
      return CollectionConverters.asScala(out.iterator());
    }

    private static List<byte[][]> scan(ReadStateStore store, UnsafeProjection prefix, int space, byte[] a) {
      UnsafeRow key = prefix.apply(new GenericInternalRow(new Object[] {space, a}));
      StateStoreIterator<UnsafeRowPair> entries = store.prefixScan(key, StateStore.DEFAULT_COL_FAMILY_NAME());
      List<byte[][]> found = new ArrayList<>();
      while (entries.hasNext()) {
        UnsafeRowPair entry = entries.next();
        found.add(new byte[][] {entry.key().getBinary(2), entry.value().getBinary(0)});
      }
      return found;
    }
  }

  private static final class Write extends AbstractFunction2<StateStore, Iterator<InternalRow>, Iterator<InternalRow>>
      implements Serializable {
    private static final long serialVersionUID = 1L;
    private final boolean blind;

    Write(boolean blind) {
      this.blind = blind;
    }

    @Override
    public Iterator<InternalRow> apply(StateStore store, Iterator<InternalRow> changes) {
      UnsafeProjection keys = UnsafeProjection.create(KEY);
      UnsafeProjection values = UnsafeProjection.create(VALUE);
      String family = StateStore.DEFAULT_COL_FAMILY_NAME();
      List<InternalRow> out = new ArrayList<>();
      while (changes.hasNext()) {
        InternalRow change = changes.next();
        int space = change.getInt(0);
        byte[] a = change.getBinary(1);
        byte[] b = change.isNullAt(2) ? NONE : change.getBinary(2);
        byte[] v = change.isNullAt(3) ? null : change.getBinary(3);
        Long order = change.isNullAt(4) ? null : change.getLong(4);
        boolean prefix = change.getBoolean(5);
        UnsafeRow key = keys.apply(new GenericInternalRow(new Object[] {space, a, b})).copy();
        if (blind) {
          if (v == null) {
            store.remove(key, family);
          } else {
            store.put(key, values.apply(new GenericInternalRow(new Object[] {v, null})).copy(), family);
          }
          out.add(new GenericInternalRow(new Object[] {space, a, b, v, null}));
          continue;
        }
        UnsafeRow old = store.get(key, family);
        byte[] was = old == null ? null : old.getBinary(0);
        if (prefix && v != null && was != null && begins(was, v)) {
          out.add(new GenericInternalRow(new Object[] {space, a, b, was, was}));  // what it holds begins with v: kept
          continue;
        }
        if (order != null && old != null && !old.isNullAt(1) && old.getLong(1) > order) {
          out.add(new GenericInternalRow(new Object[] {space, a, b, was, was}));  // older than the entry: not written
          continue;
        }
        if (v == null && order == null) {
          if (old != null) {
            store.remove(key, family);
          }
        } else {
          store.put(key, values.apply(new GenericInternalRow(new Object[] {v, order})).copy(), family);
        }
        out.add(new GenericInternalRow(new Object[] {space, a, b, v, was}));
      }
      store.commit();
      return CollectionConverters.asScala(out.iterator());
    }
  }

  private static boolean begins(byte[] value, byte[] prefix) {
    return value.length >= prefix.length && java.util.Arrays.equals(value, 0, prefix.length, prefix, 0, prefix.length);
  }

  /** A read's (space, a, tag), compared by content. */
  private record Asked(int space, byte[] a, byte[] tag) {
    @Override
    public boolean equals(Object other) {
      return other instanceof Asked that && space == that.space && java.util.Arrays.equals(a, that.a) && java.util.Arrays.equals(tag, that.tag);
    }

    @Override
    public int hashCode() {
      return 31 * (31 * space + java.util.Arrays.hashCode(a)) + java.util.Arrays.hashCode(tag);
    }
  }

  private static final class Round extends AbstractFunction2<StateStore, Iterator<InternalRow>, Iterator<InternalRow>>
      implements Serializable {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<InternalRow> apply(StateStore store, Iterator<InternalRow> ops) {
      UnsafeProjection keys = UnsafeProjection.create(KEY);
      UnsafeProjection values = UnsafeProjection.create(VALUE);
      UnsafeProjection prefix = UnsafeProjection.create(PREFIX);
      String family = StateStore.DEFAULT_COL_FAMILY_NAME();
      List<InternalRow> out = new ArrayList<>();
      List<InternalRow> reads = new ArrayList<>();
      java.util.Set<Asked> asked = new java.util.HashSet<>();  // each read once per partition
      while (ops.hasNext()) {
        InternalRow op = ops.next();
        int space = op.getInt(0);
        byte[] a = op.getBinary(1);
        byte[] tag = op.isNullAt(4) ? null : op.getBinary(4);
        if (op.getBoolean(5)) {
          if (asked.add(new Asked(space, a, tag))) {
            reads.add(new GenericInternalRow(new Object[] {space, a, tag}));
          }
          continue;
        }
        byte[] b = op.isNullAt(2) ? NONE : op.getBinary(2);
        byte[] v = op.isNullAt(3) ? null : op.getBinary(3);
        UnsafeRow key = keys.apply(new GenericInternalRow(new Object[] {space, a, b})).copy();
        UnsafeRow old = store.get(key, family);
        byte[] was = old == null ? null : old.getBinary(0);
        if (v == null) {
          if (old != null) {
            store.remove(key, family);
          }
        } else {
          store.put(key, values.apply(new GenericInternalRow(new Object[] {v, null})).copy(), family);
        }
        out.add(new GenericInternalRow(new Object[] {false, space, a, b, v, was, tag}));
      }
      for (InternalRow read : reads) {
        int space = read.getInt(0);
        byte[] a = read.getBinary(1);
        Object tag = read.isNullAt(2) ? null : read.getBinary(2);
        StateStoreIterator<UnsafeRowPair> entries =
            store.prefixScan(prefix.apply(new GenericInternalRow(new Object[] {space, a})), family);
        boolean any = false;
        while (entries.hasNext()) {
          UnsafeRowPair entry = entries.next();
          any = true;
          out.add(new GenericInternalRow(new Object[] {true, space, a, entry.key().getBinary(2), entry.value().getBinary(0), null, tag}));
        }
        if (!any) {
          out.add(new GenericInternalRow(new Object[] {true, space, a, null, null, null, tag}));
        }
      }
      store.commit();
      return CollectionConverters.asScala(out.iterator());
    }
  }

  private static final class Scan extends AbstractFunction2<ReadStateStore, Iterator<InternalRow>, Iterator<InternalRow>>
      implements Serializable {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<InternalRow> apply(ReadStateStore store, Iterator<InternalRow> ignored) {
      clearWhenDone();
      StateStoreIterator<UnsafeRowPair> all = store.iterator(StateStore.DEFAULT_COL_FAMILY_NAME());
      return new scala.collection.AbstractIterator<InternalRow>() {
        @Override
        public boolean hasNext() {
          return all.hasNext();
        }

        @Override
        public InternalRow next() {
          UnsafeRowPair entry = all.next();
          UnsafeRow key = entry.key();
          return new GenericInternalRow(new Object[] {key.getInt(0), key.getBinary(1), key.getBinary(2), entry.value().getBinary(0)});
        }
      };
    }
  }

  private static final class Count extends AbstractFunction2<ReadStateStore, Iterator<InternalRow>, Iterator<InternalRow>>
      implements Serializable {
    private static final long serialVersionUID = 1L;

    @Override
    public Iterator<InternalRow> apply(ReadStateStore store, Iterator<InternalRow> ignored) {
      clearWhenDone();
      java.util.Map<Integer, Long> counts = new java.util.TreeMap<>();
      StateStoreIterator<UnsafeRowPair> all = store.iterator(StateStore.DEFAULT_COL_FAMILY_NAME());
      while (all.hasNext()) {
        counts.merge(all.next().key().getInt(0), 1L, Long::sum);
      }
      List<InternalRow> out = new ArrayList<>();
      counts.forEach((space, n) -> out.add(new GenericInternalRow(new Object[] {space, n})));
      return CollectionConverters.asScala(out.iterator());
    }
  }
}
