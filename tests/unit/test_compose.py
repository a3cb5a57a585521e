"""docker-compose.yml documents the scale-out stack; keep it well-formed and consistent."""

from __future__ import annotations

import yaml

from catalog.settings import PROJECT_ROOT


def test_compose_file_declares_the_scale_out_stack():
    compose = yaml.safe_load((PROJECT_ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"source-db", "kafka", "connect", "catalog-db", "minio", "spark-master", "spark-worker", "prefect-server", "lakemv"} <= set(services)
    for name, service in services.items():
        assert "image" in service, name
        for dependency in service.get("depends_on", []):
            assert dependency in services, f"{name} depends on undefined {dependency}"
    lakemv_env = services["lakemv"]["environment"]
    assert lakemv_env["LAKEMV_CATALOG_URI"].startswith("postgresql://")
    assert "wal_level=logical" in services["source-db"]["command"]
