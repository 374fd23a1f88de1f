"""An indentation-aware source writer for generated C++ and Python."""

from contextlib import contextmanager


class Writer:
    def __init__(self, indent: str = "    "):
        self._lines: list[str] = []
        self._level = 0
        self._indent = indent

    def line(self, text: str = "") -> None:
        self._lines.append(f"{self._indent * self._level}{text}" if text else "")

    def lines(self, text: str) -> None:
        for line in text.splitlines():
            self.line(line)

    @contextmanager
    def indent(self):
        self._level += 1
        try:
            yield
        finally:
            self._level -= 1

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"
