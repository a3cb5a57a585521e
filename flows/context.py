"""What every flow and command needs: validated settings, the declared sources, the planned views, Spark.

Flows take a warehouse path (a plain parameter a deployment can carry) and build a `Lake` from it;
the CLI builds one from `--warehouse` and hands the same path to the flows it runs.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError
from pydantic_settings import SettingsError

from lakemv.catalog.declarations import SourceRegistry, load_sources
from lakemv.catalog.settings import LakeSettings
from lakemv.core.errors import ConfigError, redact

SECRET_FIELDS = frozenset({"s3_secret_access_key", "kafka_options"})  # never echoed in an error


def lake_settings(warehouse: str | Path | None = None) -> LakeSettings:
    """Settings from the environment (LAKEMV_*), with `warehouse` overriding LAKEMV_WAREHOUSE."""
    try:
        return LakeSettings(warehouse=str(warehouse)) if warehouse else LakeSettings()
    except ValidationError as exc:
        first = exc.errors()[0]
        value = first.get("input")
        shown = f" (got {redact(repr(value))})" if isinstance(value, str | int | float) and len(str(value)) < 200 else ""
        if first["loc"] and str(first["loc"][0]) in SECRET_FIELDS:
            shown = ""
        raise ConfigError(f"{first['msg']}{shown}", "LAKEMV_" + str(first["loc"][0]).upper()) from None
    except SettingsError as exc:  # a value the settings source could not decode at all
        field = str(exc).split('"')[1] if str(exc).count('"') >= 2 else "settings"
        raise ConfigError(f"cannot read this setting: {exc.__cause__ or exc}", "LAKEMV_" + field.upper()) from None


class Lake:
    """Settings plus the sources and view plans they point at, loaded once and on first use."""

    def __init__(self, settings: LakeSettings):
        self.settings = settings
        self._sources: SourceRegistry | None = None
        self._plans: dict | None = None

    @classmethod
    def at(cls, warehouse: str | Path | None = None) -> Lake:
        return cls(lake_settings(warehouse))

    @property
    def sources(self) -> SourceRegistry:
        if self._sources is None:
            self._sources = load_sources(self.settings.sources_dirs)
        return self._sources

    @property
    def plans(self) -> dict:
        """Every view definition, planned, each after the views it reads (a view outside the supported
        class, or views reading each other in a cycle, fail here)."""
        if self._plans is None:
            from lakemv.core.planner.dag import plan_views
            from lakemv.core.planner.definitions import load_views

            self._plans = plan_views(load_views(self.settings.view_dirs), self.sources)  # (in dependency order)
        return self._plans

    def checked_plans(self, spark=None) -> dict:  # noqa: ANN001 - a SparkSession, when one runs
        """`plans`, each also analysed by Spark (see lakemv.spark.analysis): in `spark` when given, else
        from the record of earlier analyses, starting Spark only for definitions not seen before."""
        from lakemv.spark.analysis import check_views

        plans = self.plans
        check_views(self.settings, list(plans.values()), self.sources, spark if spark is not None else self.spark)
        return plans

    def plan(self, name: str):  # noqa: ANN201 - lakemv.core.planner.ViewPlan, imported lazily
        plans = self.plans
        if name not in plans:
            known = ", ".join(sorted(plans)) or "none"
            raise ConfigError(f"no view named {name!r} (views: {known})", "VIEW")
        return plans[name]

    def warm_up(self) -> None:
        """Start Spark in the background; `spark()` then waits for it instead of starting it."""
        from lakemv.spark.session import warm_up

        warm_up(self.settings)

    def spark(self):  # noqa: ANN201 - pyspark imported lazily: commands without Spark start fast
        """The process's SparkSession with this lake's catalog (started on first use)."""
        from lakemv.spark.session import get_spark

        return get_spark(self.settings)
