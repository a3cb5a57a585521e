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
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.iceberg.ContentFile;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.MetricsConfig;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.SerializableTable;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.GenericRecord;
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
 * file written ({@code meta}: the Iceberg file, serialized); {@link #commit} commits those files. The
 * tables are generic: nothing here knows a view.
 */
public final class ViewFiles {
  private ViewFiles() {}

  public static final StructType WRITTEN =
      new StructType()
          .add("view", DataTypes.IntegerType, false)
          .add("k", DataTypes.BinaryType, true)
          .add("d", DataTypes.BinaryType, true)
          .add("file", DataTypes.StringType, true)
          .add("pos", DataTypes.LongType, true)
          .add("meta", DataTypes.BinaryType, true)
          .add("refs", DataTypes.createArrayType(DataTypes.StringType), true);

  /** The files of `changes` written into the tables `tables` (view id -> table name), in `partitions` tasks. */
  public static Dataset<Row> write(SparkSession spark, Dataset<Row> changes, Map<Integer, String> tables, String prefix, int partitions) {
    Map<Integer, Table> loaded = new HashMap<>();
    for (Map.Entry<Integer, String> e : tables.entrySet()) {
      loaded.put(e.getKey(), SerializableTable.copyOf(load(spark, e.getValue())));
    }
    Broadcast<Map<Integer, Table>> shared = JavaSparkContext.fromSparkContext(spark.sparkContext()).broadcast(loaded);
    Dataset<Row> sorted =
        changes
            .select("view", "k", "d", "row", "file", "pos")
            .repartition(partitions, functions.col("view"))
            .sortWithinPartitions("view", "file", "pos");
    MapPartitionsFunction<Row, Row> writeAll = rows -> new Writer(shared.value(), prefix).run(rows);
    return sorted.mapPartitions(writeAll, Encoders.row(WRITTEN));
  }

  /**
   * Commits the files `written` holds ({@link #write}'s rows, computed once), one RowDelta per table
   * from `threads` threads, each with `summary` in its snapshot's summary; each view's new snapshot id.
   */
  public static Map<Integer, Long> commit(
      SparkSession spark, Dataset<Row> written, Map<Integer, String> tables, Map<String, String> summary, int threads) throws Exception {
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
      Map<Integer, Future<Long>> running = new LinkedHashMap<>();
      for (Map.Entry<Integer, List<ContentFile<?>>> e : files.entrySet()) {
        int view = e.getKey();
        running.put(view, pool.submit(() -> commitOne(load(spark, tables.get(view)), e.getValue(), refs.get(view), summary)));
      }
      for (Map.Entry<Integer, Future<Long>> e : running.entrySet()) {
        made.put(e.getKey(), e.getValue().get());
      }
    } finally {
      pool.shutdown();
    }
    return made;
  }

  private static long commitOne(Table table, List<ContentFile<?>> files, Set<String> refs, Map<String, String> summary) {
    RowDelta delta = table.newRowDelta();
    Long base = table.currentSnapshot() == null ? null : table.currentSnapshot().snapshotId();
    for (ContentFile<?> f : files) {
      if (f instanceof DataFile) {
        delta.addRows((DataFile) f);
      } else {
        delta.addDeletes((DeleteFile) f);
      }
    }
    if (refs != null && !refs.isEmpty()) {
      // the rows deleted must still be where the state says: a compaction committed since the load fails this commit
      if (base != null) {
        delta.validateFromSnapshot(base);
      }
      delta.validateDataFilesExist(refs).validateDeletedFiles();
    }
    summary.forEach(delta::set);
    delta.commit();
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
