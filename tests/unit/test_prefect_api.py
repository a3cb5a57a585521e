"""The Prefect API URL lakemv exports reaches every thread of the process (no server needed).

Spark runs each batch on its callback thread, which logs the batch line. A thread that has not
entered lakemv's `temporary_settings` reads Prefect's global settings; when those lack the API URL,
Prefect starts an in-process ephemeral server just to ship that thread's logs (seconds per command).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json, threading
    import prefect.context  # imported before the URL is known, as the CLI's flow modules do
    from prefect.settings import get_current_settings
    from lakemv.flows.server import export_api_url

    def seen():
        box = []
        thread = threading.Thread(target=lambda: box.append(get_current_settings().api.url))
        thread.start()
        thread.join()
        return box[0]

    before = seen()
    export_api_url("http://127.0.0.1:9/api")
    during = seen()
    export_api_url(None)
    print(json.dumps([before, during, seen()]))
    """
)


def test_the_exported_api_url_reaches_threads_that_did_not_set_it():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == [None, "http://127.0.0.1:9/api", None]
