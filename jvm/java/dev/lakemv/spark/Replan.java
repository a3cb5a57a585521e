package dev.lakemv.spark;

import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.execution.LocalTableScanExec;
import org.apache.spark.sql.execution.SparkPlan;
import scala.collection.Iterator;
import scala.collection.immutable.Seq;
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

  /** The marker of a local scan's output: its column whose name starts with `prefix`, else null. */
  private static String marker(LocalTableScanExec scan, String prefix) {
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
                && !(node instanceof LocalTableScanExec scan && marker(scan, prefix) != null)) {
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

  /** A DataFrame of what `plan` computes (a scan of its RDD: collecting it runs the plan). */
  public static Dataset<?> frame(SparkSession session, SparkPlan plan) {
    return session.internalCreateDataFrame(plan.execute(), plan.schema(), false);
  }
}
