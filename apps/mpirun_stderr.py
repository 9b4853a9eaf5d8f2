"""mpirun's standard error as the --nproc launcher shows it: the ranks' lines pass through at once;
Open MPI's own messages (dash-framed help blocks such as "MPI_ABORT was invoked on rank 1 ...",
their "N more processes have sent help message" notes) are held back. After a failure they
only say that the job was aborted, which the launcher's one-line verdict says better; when no rank
left a record (it was killed, crashed, or left by os._exit) they are the only witness, and
`summary()` turns them into that line. Open MPI's known noise around clean exits and clean refusals
(ORTE_ERROR_LOG lines such as "Data unpack would read past end of buffer", the "A system call failed
during shared memory initialization" block) is never shown. Everything, noise included, goes to the
run's log file when one is given."""

from __future__ import annotations

import re
import threading
from typing import IO

RULE = "-" * 74  # Open MPI frames every help message with this line
_NOTE = re.compile(r"^\[[^\]]*\] \d+ more process(es)? ha(s|ve) sent help message")
# Open MPI's runtime logging its own internal errors, e.g. "[vm:27970] [[444,0],0] ORTE_ERROR_LOG: Data unpack
# would read past end of buffer in file ../../../orte/util/show_help.c at line 513" (a help message lost as its
# rank exited), and a help block about shared memory segments already removed as the job ended
_NOISE_LINE = re.compile(
    r"^\[[^\]]*\] .*ORTE_ERROR_LOG: |"
    r"^\[[^\]]*\] \d+ more process(es)? ha(s|ve) sent help message help-opal-shmem|"
    r"^(\[[^\]]*\] )?Set MCA parameter \"orte_base_help_aggregate\""
)  # a hint of those notes
_NOISE_BLOCK = re.compile(r"A system call failed during shared memory initialization")
_SIGNALLED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)(?: \(([^)]*)\))?")
_EXITED = re.compile(r"Process name:\s+\[\[\d+,\d+\],(\d+)\]\s+Exit code:\s+(\d+)")
_ABORTED = re.compile(r"MPI_ABORT was invoked on rank (\d+) in communicator \S+\s+with errorcode (\d+)")


class MpirunStderr:
    """Copies `source` (mpirun's stderr, bytes) to `sink` line by line on a thread, holding back
    Open MPI's messages in `held` and its noise in `noise`; every line also goes to `log` if given."""

    def __init__(self, source: IO[bytes], sink: IO[str], log: IO[str] | None = None) -> None:
        self.held: list[str] = []
        self.noise: list[str] = []
        self._source, self._sink, self._log = source, sink, log
        self._block: list[str] | None = None
        self._thread = threading.Thread(target=self._copy, name="mpirun-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        for raw in iter(self._source.readline, b""):
            self.feed(raw.decode(errors="replace"))
        if self._block is not None:  # an unclosed frame was not Open MPI's: let it through
            self._write("".join(self._block))
            self._block = None

    def feed(self, line: str) -> None:
        text = line.rstrip("\r\n")
        if self._log is not None:
            self._log.write(line)
            self._log.flush()
        if self._block is not None:
            self._block.append(line)
            if text == RULE:
                block = "".join(self._block)
                (self.noise if _NOISE_BLOCK.search(block) else self.held).append(block)
                self._block = None
        elif text == RULE:
            self._block = [line]
        elif _NOISE_LINE.match(text):
            self.noise.append(line)
        elif _NOTE.match(text):
            self.held.append(line)
        else:
            self._write(line)

    def _write(self, text: str) -> None:
        self._sink.write(text)
        self._sink.flush()

    def join(self) -> None:
        self._thread.join()

    def summary(self) -> str | None:
        """What the held messages say about a rank that failed without a record, in one line."""
        text = "".join(self.held)
        if m := _SIGNALLED.search(text):
            return f"rank {m[1]} was killed by signal {m[2]}" + (f" ({m[3]})" if m[3] else "")
        if m := _EXITED.search(text):
            return f"rank {m[1]} exited with code {m[2]} without reporting an error"
        if m := _ABORTED.search(text):
            return f"rank {m[1]} called MPI_Abort with error code {m[2]}"
        return None
