"""The bench's sampler of a running command's resident memory (bench.memory): a real child process,
no JVM; a child that is not a JVM counts for neither figure."""

import subprocess
import sys

from bench.memory import PeakMemory

HOLD = "x = bytearray({size}); import time; time.sleep(1.5)"


def test_the_peak_of_a_process_is_sampled_and_a_child_that_is_not_java_is_left_out():
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {HOLD.format(size=150_000_000)!r}])"
    process = subprocess.Popen([sys.executable, "-c", f"{HOLD.format(size=80_000_000)}; {child}"])
    memory = PeakMemory(process)
    process.wait()
    peaks = memory.stop()
    assert 80 <= peaks["python_mib"] < 140, peaks  # its own 80 MB, not its child's 150
    assert peaks["jvm_mib"] == 0, peaks
