"""The toolkit's messages go through logging: a host program routes and filters them, the commands show
them, and no library function writes to stderr behind logging's back."""
from __future__ import annotations

import ast
import logging
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("estimators", "bounds", "stats", "execution", "schema", "simulators", "llm_runs", "claims", "figures",
            "report_card", "studies")


def _stderr_writes_outside_commands() -> list[str]:
    """``print(..., file=sys.stderr)`` and ``sys.stderr.write`` outside a command's ``main`` (a function named
    ``main`` or ``_main*``, an ``if __name__ == "__main__"`` block, or a ``__main__`` module): where a library
    function would bypass logging."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.name == "__main__.py" or path.relative_to(ROOT).as_posix() == "schema/log.py":
                continue  # a command module; the commands' own logging handler
            tree = ast.parse(path.read_text())
            stack: list[str] = []

            def visit(node, stack=stack, path=path):
                is_fn = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                if is_fn:
                    stack.append(node.name)
                if isinstance(node, ast.If) and "__name__ == '__main__'" in ast.unparse(node.test):
                    return  # a module's command block
                if isinstance(node, ast.Call):
                    src = ast.unparse(node)
                    to_stderr = (("file=sys.stderr" in src and src.startswith("print("))
                                 or src.startswith("sys.stderr.write("))
                    if to_stderr and not any(n == "main" or n.startswith("_main") for n in stack):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} in {'.'.join(stack) or 'module'}")
                for child in ast.iter_child_nodes(node):
                    visit(child)
                if is_fn:
                    stack.pop()

            visit(tree)
    return found


def test_no_library_function_writes_to_stderr_outside_logging():
    assert _stderr_writes_outside_commands() == []


def test_a_host_routes_and_filters_the_toolkits_warnings(tmp_path):
    from schema.io import same_settings_or_move_aside, write_json

    out = tmp_path / "run"
    out.mkdir()
    write_json(out / "config.json", {"a": 1})
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record)

    lg = logging.getLogger("schema")
    handler = Keep()
    lg.addHandler(handler)
    try:
        assert same_settings_or_move_aside(out, {"a": 2}, ["a"], force=True) is False
        assert [r.name for r in seen] == ["schema.io"] and "moved the old results to" in seen[0].getMessage()
        lg.setLevel(logging.ERROR)  # the host silences the toolkit's warnings
        other = tmp_path / "other"
        other.mkdir()
        write_json(other / "config.json", {"a": 1})
        assert same_settings_or_move_aside(other, {"a": 2}, ["a"], force=True) is False
        assert len(seen) == 1
    finally:
        lg.removeHandler(handler)
        lg.setLevel(logging.NOTSET)


def test_cli_logging_shows_progress_and_leaves_a_hosts_handler_alone(capsys):
    from schema.log import PACKAGES as CONFIGURED
    from schema.log import cli_logging

    assert set(CONFIGURED) == set(PACKAGES)
    # conftest gives the toolkit's loggers back as they were after the test
    mine = logging.NullHandler()
    for n in CONFIGURED:  # unconfigured, as a fresh command finds them, but for the host's own handler
        logging.getLogger(n).handlers[:] = [mine] if n == "llm_runs" else []
    cli_logging()
    logging.getLogger("simulators.sweep").info("progress %d", 3)
    assert capsys.readouterr().err == "progress 3\n"
    assert logging.getLogger("llm_runs").handlers == [mine]


def test_the_commands_handler_writes_to_stderr_as_it_is_when_a_message_is_emitted(capsys):
    """A command run in-process twice (as the tests run them) must not keep writing to the stderr of the first run,
    which pytest has closed by then."""
    import io
    import sys

    from schema.log import _Stderr

    handler = _Stderr()
    old = sys.stderr
    first = io.StringIO()
    sys.stderr = first
    try:
        handler.emit(logging.makeLogRecord({"msg": "one"}))
        first.close()
        sys.stderr = second = io.StringIO()
        handler.emit(logging.makeLogRecord({"msg": "two"}))
        assert second.getvalue() == "two\n"
    finally:
        sys.stderr = old
