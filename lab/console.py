"""What the lab prints, and where: plain lines folded to WIDTH columns, or on a terminal with rich installed,
rich tables and a progress bar over the points; the report goes to stderr when stdout carries the CSV."""

from __future__ import annotations

import contextlib
import sys
import textwrap

WIDTH = 120  # the widest line the lab prints, tables aside


# On a terminal, with rich installed: tables drawn by rich and a progress bar over the points; the
# plain text otherwise (logs, pipes, CI), which is what the tests read.
_PROGRESS: list = []  # the rich Progress while the points run
_STREAM = [sys.stdout]  # where the lab's report goes: stderr when stdout carries the CSV (`--csv` alone)


def rich_console():
    """rich's Console when the report goes to a terminal and rich is installed, else None."""
    if not _STREAM[0].isatty():
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return _PROGRESS[0].console if _PROGRESS else Console(file=_STREAM[0], width=max(WIDTH, 200))


def log(msg: str = "") -> None:
    if _PROGRESS:  # above the progress bar, not through it
        _PROGRESS[0].console.print(msg, markup=False, highlight=False)
    else:
        print(msg, flush=True, file=_STREAM[0])


def wrap(text: str, indent: int = 4) -> str:
    """text folded to WIDTH columns, continuation lines indented."""
    return textwrap.fill(text, WIDTH, subsequent_indent=" " * indent, break_on_hyphens=False)



@contextlib.contextmanager
def progress_bar(total: int):
    """A rich progress bar over the points on a terminal (yields advance(description)); a no-op elsewhere,
    where each point's line is the progress."""
    if rich_console() is None:
        yield lambda description: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True, console=rich_console()) as progress:
        task = progress.add_task("points", total=total)
        _PROGRESS.append(progress)
        try:
            yield lambda description: progress.update(task, advance=1, description=description)
        finally:
            _PROGRESS.clear()




def set_stream(stream) -> None:
    """Where log() writes from now on (stdout, or stderr when stdout carries the CSV)."""
    _STREAM[0] = stream
