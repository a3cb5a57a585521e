package dev.lakemv.iceberg;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.nio.ByteBuffer;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.iceberg.ContentFile;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.SerializableTable;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.GenericRecord;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.data.parquet.GenericParquetWriter;
import org.apache.iceberg.deletes.PositionDelete;
import org.apache.iceberg.deletes.PositionDeleteWriter;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.spark.Spark3Util;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
import org.apache.iceberg.util.SnapshotUtil;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.broadcast.Broadcast;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Rows of many Iceberg tables written in one Spark job, and committed as one {@code RowDelta} per
 * table: new rows into a data file, the rows they replace as position deletes.
 *
 * <p>The caller knows where every replaced row lives (its data file and position, kept beside the
 * row's digest in the engine state), so no table is read: a change is {@code (view int, k binary,
 * d binary, row string, file string, pos bigint)}, {@code row} the new row as JSON in the table's
 * columns (null: the row goes), {@code file}/{@code pos} the place of the row it replaces (null:
 * none). Rows are shuffled by view, so each table gets one data file and one delete file a batch.
 * {@link #write} gives each written row's new place {@code (view, k, d, file, pos)} and one row per
 * file written ({@code meta}: the Iceberg file, serialized); {@link #commit} commits those files. An
 * instance ({@link #open}) keeps its tables loaded across batches. The tables are generic: nothing
 * here knows a view.
 */
public final class ViewFiles {
  /** The snapshot summary's batch id, which every commit of a batch carries. */
  public static final String BATCH = "lakemv.batch";

  public static final StructType WRITTEN =
      new StructType()
          .add("view", DataTypes.IntegerType, false)
          .add("k", DataTypes.BinaryType, true)
          .add("d", DataTypes.BinaryType, true)
          .add("file", DataTypes.StringType, true)
          .add("pos", DataTypes.LongType, true)
          .add("meta", DataTypes.BinaryType, true)
          .add("refs", DataTypes.createArrayType(DataTypes.StringType), true);

  private final Map<Integer, Table> tables = new HashMap<>(); // loaded once: lakemv is their only writer, and a commit refreshes
  private final Map<Integer, Long> since = new HashMap<>(); // per table, the snapshot the caller's places were read at
  private final Broadcast<Map<Integer, Table>> shared; // what the writing tasks need of each table (schema, spec, location, io)

  private ViewFiles(SparkSession spark, Map<Integer, String> names) {
    Map<Integer, Table> copies = new HashMap<>();
    for (Map.Entry<Integer, String> e : names.entrySet()) {
      Table table = load(spark, e.getValue());
      tables.put(e.getKey(), table);
      copies.put(e.getKey(), SerializableTable.copyOf(table));
      Long read = published(table);
      if (read != null) {
        since.put(e.getKey(), read);
      }
    }
    shared = JavaSparkContext.fromSparkContext(spark.sparkContext()).broadcast(copies);
  }

  /**
   * The tables `names` (view id -> table name), loaded once for every batch to come. The places the
   * caller keeps were read at each table's last snapshot a batch published (stamped with
   * {@code lakemv.batch}), or at its current one if no batch has published yet: a commit validates
   * from there, so a compaction since then fails it rather than leaving a replaced row behind.
   */
  public static ViewFiles open(SparkSession spark, Map<Integer, String> names) {
    return new ViewFiles(spark, names);
  }

  /** The latest snapshot of `table` a batch committed, else its current one (null: no snapshot). */
  private static Long published(Table table) {
    for (Snapshot s : SnapshotUtil.currentAncestors(table)) {
      if (s.summary().containsKey(BATCH)) {
        return s.snapshotId();
      }
    }
    return table.currentSnapshot() == null ? null : table.currentSnapshot().snapshotId();
  }

  /** The files of `changes` written into the tables, in `partitions` tasks. */
  public Dataset<Row> write(Dataset<Row> changes, String prefix, int partitions) {
    Broadcast<Map<Integer, Table>> tasks = shared; // a local: the task closure must not capture this handle
    Dataset<Row> sorted =
        changes
            .select("view", "k", "d", "row", "file", "pos")
            .repartition(partitions, functions.col("view"))
            .sortWithinPartitions("view", "file", "pos");
    MapPartitionsFunction<Row, Row> writeAll = rows -> new Writer(tasks.value(), prefix).run(rows);
    return sorted.mapPartitions(writeAll, Encoders.row(WRITTEN));
  }

  /**
   * Commits the files `written` holds ({@link #write}'s rows, computed once), one RowDelta per table
   * from `threads` threads, each snapshot stamped with `batch` ({@link #BATCH}); each view's new snapshot id.
   */
  public Map<Integer, Long> commit(Dataset<Row> written, String batch, int threads) throws Exception {
    Map<String, String> summary = Map.of(BATCH, batch);
    Map<Integer, List<ContentFile<?>>> files = new HashMap<>();
    Map<Integer, Set<String>> refs = new HashMap<>();
    for (Row r : written.where(functions.col("meta").isNotNull()).select("view", "meta", "refs").collectAsList()) {
      int view = r.getInt(0);
      files.computeIfAbsent(view, v -> new ArrayList<>()).add((ContentFile<?>) deserialize((byte[]) r.get(1)));
      if (!r.isNullAt(2)) {
        refs.computeIfAbsent(view, v -> new LinkedHashSet<>()).addAll(r.getList(2));
      }
    }
    Map<Integer, Long> made = new HashMap<>();
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, threads));
    try {
      // first every table is checked, so that a rewritten one fails the batch before any view commits
      Map<Integer, Future<Boolean>> checks = new LinkedHashMap<>();
      for (Integer view : files.keySet()) {
        Table table = tables.get(view);
        if (table == null) {
          throw new IllegalArgumentException("no table for view id " + view);
        }
        checks.put(view, pool.submit(() -> rewrote(table, since.get(view), refs.get(view))));
      }
      List<Integer> stale = new ArrayList<>();
      for (Map.Entry<Integer, Future<Boolean>> e : checks.entrySet()) {
        if (e.getValue().get()) {
          stale.add(e.getKey());
        }
      }
      if (!stale.isEmpty()) {
        throw new Rewritten(stale, false);
      }
      Map<Integer, Future<Long>> running = new LinkedHashMap<>();
      for (Map.Entry<Integer, List<ContentFile<?>>> e : files.entrySet()) {
        int view = e.getKey();
        Table table = tables.get(view);
        running.put(view, pool.submit(() -> commitOne(table, e.getValue(), refs.get(view), since.get(view), summary)));
      }
      List<Integer> rewritten = new ArrayList<>();
      for (Map.Entry<Integer, Future<Long>> e : running.entrySet()) {
        try {
          made.put(e.getKey(), e.getValue().get());
        } catch (ExecutionException failed) {
          if (!(failed.getCause() instanceof ValidationException)) {
            throw failed;
          }
          rewritten.add(e.getKey());
        }
      }
      since.putAll(made);
      if (!rewritten.isEmpty()) {
        throw new Rewritten(rewritten, !made.isEmpty());
      }
    } finally {
      pool.shutdown();
    }
    return made;
  }

  /** Tables whose files a batch's deletes point into were rewritten (a compaction) since the places were read. */
  public static final class Rewritten extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final List<Integer> views;
    private final boolean othersCommitted;

    Rewritten(List<Integer> views, boolean othersCommitted) {
      super("tables rewritten since their rows' places were read (views " + views + "): their places must be read again"
          + (othersCommitted ? "; the other views of the batch committed" : "; no view of the batch committed"));
      this.views = List.copyOf(views);
      this.othersCommitted = othersCommitted;
    }

    public List<Integer> views() {
      return views;
    }

    /** Whether other views' commits of the batch landed (a rewrite raced the commits), or none did. */
    public boolean othersCommitted() {
      return othersCommitted;
    }
  }

  /**
   * Whether another writer removed a file of `refs` from `table` since the snapshot `since` (after a
   * refresh; only when some other snapshot followed it are the snapshots' manifests read). A history
   * that no longer reaches `since` (expired, replaced) counts as rewritten: nothing proves the places.
   */
  private static boolean rewrote(Table table, Long since, Set<String> refs) {
    table.refresh();
    Snapshot current = table.currentSnapshot();
    if (refs == null || refs.isEmpty() || since == null || current == null || current.snapshotId() == since) {
      return false;
    }
    for (Snapshot s : SnapshotUtil.currentAncestors(table)) {
      if (s.snapshotId() == since) {
        return false;
      }
      for (DataFile removed : s.removedDataFiles(table.io())) {
        if (refs.contains(removed.location())) {
          return true;
        }
      }
    }
    return true;
  }

  private static long commitOne(Table table, List<ContentFile<?>> files, Set<String> refs, Long since, Map<String, String> summary) {
    RowDelta delta = table.newRowDelta();
    for (ContentFile<?> f : files) {
      if (f instanceof DataFile) {
        delta.addRows((DataFile) f);
      } else {
        delta.addDeletes((DeleteFile) f);
      }
    }
    if (refs != null && !refs.isEmpty()) {
      // the rows deleted must still be where the places say: a rewrite of their files since the places were read fails this commit
      if (since != null) {
        delta.validateFromSnapshot(since);
      }
      delta.validateDataFilesExist(refs).validateDeletedFiles();
    }
    summary.forEach(delta::set);
    delta.commit(); // refreshes the table first, so a commit by another writer is seen, not overwritten
    return table.currentSnapshot().snapshotId(); // the commit left the table at its own snapshot
  }

  private static Table load(SparkSession spark, String name) {
    try {
      return Spark3Util.loadIcebergTable(spark, name);
    } catch (Exception e) {
      throw new IllegalArgumentException("no Iceberg table " + name + ": " + e.getMessage(), e);
    }
  }

  static byte[] serialize(Object o) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject(o);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return bytes.toByteArray();
  }

  static Object deserialize(byte[] b) throws IOException, ClassNotFoundException {
    try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(b))) {
      return in.readObject();
    }
  }

  /** One task's rows, sorted by (view, file, pos): one data file and one delete file per view. */
  private static final class Writer implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final ObjectMapper JSON = new ObjectMapper().enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS);
    private final Map<Integer, Table> tables;
    private final String prefix;
    private final List<Row> out = new ArrayList<>();
    private Integer view;
    private Table table;
    private DataWriter<Record> data;
    private String dataPath;
    private long position;
    private PositionDeleteWriter<Record> deletes;
    private final PositionDelete<Record> delete = PositionDelete.create();
    private final Set<String> referenced = new LinkedHashSet<>();

    Writer(Map<Integer, Table> tables, String prefix) {
      this.tables = tables;
      this.prefix = prefix;
    }

    Iterator<Row> run(Iterator<Row> rows) throws IOException {
      while (rows.hasNext()) {
        Row r = rows.next();
        int v = r.getInt(0);
        if (view == null || v != view) {
          finish();
          view = v;
          table = tables.get(v);
          if (table == null) {
            throw new IllegalArgumentException("no table for view id " + v);
          }
        }
        if (!r.isNullAt(4)) {
          String file = r.getString(4);
          referenced.add(file);
          deletes().write(delete.set(file, r.getLong(5)));
        }
        if (!r.isNullAt(3)) {
          data().write(record(table.schema().asStruct(), JSON.readTree(r.getString(3))));
          out.add(RowFactory.create(v, r.get(1), r.get(2), dataPath, position++, null, null));
        }
      }
      finish();
      return out.iterator();
    }

    private String path(String kind) {
      TaskContext task = TaskContext.get();
      int part = task == null ? 0 : task.partitionId();
      String name = String.format("%s-%s-%05d-%d-%s.parquet", prefix, kind, part, view, UUID.randomUUID());
      return table.locationProvider().newDataLocation(name);
    }

    private DataWriter<Record> data() throws IOException {
      if (data == null) {
        OutputFile file = table.io().newOutputFile(path("rows"));
        dataPath = file.location(); // as the table's manifests will name it (the FileIO's form: file:/x, not file:///x)
        data =
            Parquet.writeData(file)
                .forTable(table)
                .createWriterFunc(GenericParquetWriter::create)
                .withSpec(table.spec())
                .overwrite()
                .build();
        position = 0;
      }
      return data;
    }

    private PositionDeleteWriter<Record> deletes() throws IOException {
      if (deletes == null) {
        // not forTable: it gives the writer the table's row schema, and a position delete here carries no row
        deletes =
            Parquet.writeDeletes(table.io().newOutputFile(path("deletes")))
                .setAll(table.properties())
                .metricsConfig(MetricsConfig.forPositionDelete())
                .withSpec(table.spec())
                .overwrite()
                .buildPositionWriter();
      }
      return deletes;
    }

    private void finish() throws IOException {
      if (data != null) {
        data.close();
        out.add(RowFactory.create(view, null, null, null, null, serialize(data.toDataFile()), null));
        data = null;
      }
      if (deletes != null) {
        deletes.close();
        out.add(RowFactory.create(view, null, null, null, null, serialize(deletes.toDeleteFile()), CollectionConverters.asScala(new ArrayList<>(referenced)).toSeq()));
        deletes = null;
      }
      referenced.clear();
    }
  }

  /** A JSON row (Spark's to_json of the row, timestamps to the microsecond) as an Iceberg record of `struct`. */
  static Record record(Types.StructType struct, JsonNode node) {
    GenericRecord record = GenericRecord.create(struct);
    List<Types.NestedField> fields = struct.fields();
    for (int i = 0; i < fields.size(); i++) {
      Types.NestedField f = fields.get(i);
      JsonNode value = node.get(f.name());
      record.set(i, value == null || value.isNull() ? null : value(f.type(), value));
    }
    return record;
  }

  static Object value(Type type, JsonNode node) {
    switch (type.typeId()) {
      case BOOLEAN:
        return node.isTextual() ? Boolean.parseBoolean(node.asText()) : node.booleanValue();
      case INTEGER:
        return node.isTextual() ? Integer.parseInt(node.asText()) : node.intValue();
      case LONG:
        return node.isTextual() ? Long.parseLong(node.asText()) : node.longValue();
      case FLOAT:
        return node.isTextual() ? Float.parseFloat(node.asText()) : node.floatValue();
      case DOUBLE:
        return node.isTextual() ? Double.parseDouble(node.asText()) : node.doubleValue();
      case DECIMAL:
        BigDecimal d = node.isTextual() ? new BigDecimal(node.asText()) : node.decimalValue();
        return d.setScale(((Types.DecimalType) type).scale(), RoundingMode.UNNECESSARY);
      case STRING:
        return node.isTextual() ? node.asText() : node.toString();
      case DATE:
        return LocalDate.parse(node.asText());
      case TIME:
        return LocalTime.parse(node.asText());
      case TIMESTAMP:
        return ((Types.TimestampType) type).shouldAdjustToUTC()
            ? OffsetDateTime.parse(node.asText())
            : LocalDateTime.parse(node.asText());
      case BINARY:
        return ByteBuffer.wrap(Base64.getDecoder().decode(node.asText()));
      case UUID:
        return UUID.fromString(node.asText());
      case LIST:
        Type element = ((Types.ListType) type).elementType();
        List<Object> list = new ArrayList<>(node.size());
        for (JsonNode e : node) {
          list.add(e.isNull() ? null : value(element, e));
        }
        return list;
      case MAP:
        Types.MapType map = (Types.MapType) type;
        Map<Object, Object> m = new LinkedHashMap<>();
        node.fields().forEachRemaining(e -> m.put(value(map.keyType(), new com.fasterxml.jackson.databind.node.TextNode(e.getKey())),
            e.getValue().isNull() ? null : value(map.valueType(), e.getValue())));
        return m;
      case STRUCT:
        return record((Types.StructType) type, node);
      default:
        throw new IllegalArgumentException("a view column of type " + type + " cannot be written from its JSON");
    }
  }
}
