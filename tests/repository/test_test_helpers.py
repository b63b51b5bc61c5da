"""The test suite's own helpers, where a fault would make other tests flaky."""
import json
import subprocess
import sys

import pytest

from helpers import ProcessOutput

WRITER = """
import json, sys
for number in range(4000):
    line = {"writer": int(sys.argv[1]), "line": number, "pad": "x" * 80}
    sys.stdout.write(json.dumps(line) + "\\n")
    sys.stdout.flush()
"""


@pytest.mark.slow
def test_process_output_keeps_every_line_its_writers_append_while_it_is_read():
    # Three processes write at once, as gunicorn's master and workers do,
    # while the test reads the output again and again, as tests waiting on
    # a log line do: every line must arrive whole, none overwritten.
    output = ProcessOutput()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(number)],
                                stdout=output.file) for number in range(3)]
    reads = 0
    while any(writer.poll() is None for writer in writers) or reads == 0:
        output.read()
        reads += 1
    for writer in writers:
        assert writer.wait(timeout=60) == 0
    lines = [json.loads(line) for line in output.read().splitlines()]
    assert sorted((line["writer"], line["line"]) for line in lines) == [
        (writer, number) for writer in range(3) for number in range(4000)]
