"""Key-propagation planner: reads a view's SQL (sqlglot) and derives how changed rows reach view keys.

A view is maintainable when it is *key-local*: every output row is determined by the rows reachable
from its key through equality predicates. The planner checks that, table occurrence by occurrence:

* every source table the SQL reads (each occurrence: a table read twice is two occurrences) must be
  linked to the *anchor* - the occurrence the key columns come from - by equalities: JOIN ... ON
  a = b, correlated subqueries (WHERE inner.c = outer.c), `x IN (SELECT c ...)`, and CTEs or FROM
  subqueries joined on their GROUP BY columns;
* the links form a tree rooted at the anchor. Upwards, a changed row maps to view keys by joining
  its link columns through the live tables on the path; downwards, the rows a key needs are the
  anchor's rows for the key, then each child table semi-joined with its parent's filtered rows;
* the key must be unique by construction: the anchor's primary key (and every join in the main query
  matches at most one row: a primary key, a declared unique key, a derived table's GROUP BY), or among
  the GROUP BY columns of the main query, with the other GROUP BY columns determined by it;
* a window function's partitions must be whole in the rows one key reads (`windows`).

Anything else - non-equality joins, uncorrelated reads, windows over more than a key's rows, LIMIT,
set operations, non-deterministic functions - is refused with a ViewDefinitionError naming the fragment.
The plan is pure data; `lakemv.core.sql.viewsql` turns it into SQL.

* `model`: the plan - occurrences, links, key columns - as frozen data, and `over` to render it;
* `plan`: `plan_view`, which runs the stages below over one parsed definition;
* `refusals`: constructs, tables, scopes and output columns outside the class, refused by fragment;
* `ctes`: CTE inlining, so each read of a CTE has its own table occurrences;
* `resolve`: which occurrence's row a column or expression comes from;
* `edges`: the equalities that tie occurrences together;
* `keys`: the anchor, the proof that the key is unique, and the tree of links;
* `windows`: window functions, checked against the tree of links and the key;
* `state` and `sql`: the planner's working state and the small sqlglot helpers the stages share.
"""

from __future__ import annotations

from lakemv.core.planner.model import OCCURRENCE, SELF, Branch, KeyColumn, Link, Occurrence, ViewPlan, over
from lakemv.core.planner.plan import plan_view
from lakemv.core.planner.refusals import NONDETERMINISTIC

__all__ = [
    "NONDETERMINISTIC",
    "Branch",
    "OCCURRENCE",
    "SELF",
    "KeyColumn",
    "Link",
    "Occurrence",
    "ViewPlan",
    "over",
    "plan_view",
]
