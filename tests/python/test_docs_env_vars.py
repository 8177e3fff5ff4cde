"""Every `MXFUSE_*` environment variable the shipped code reads is documented where a user looks
(README.md or docs/*.md). New-user probe 9 found `MXFUSE_CPU_ISA`'s values and `MXFUSE_CPU_AMX`
only in README's benchmark prose and docs/ops.md's GEMM order; docs/provider.md now lists them
("Environment variables"), and this keeps a new variable from being added without a line there.

Dev-only switches are exempt: `MXFUSE_TEST_*` (unit tests of the switch reader) and
`MXFUSE_WRITE_*` (regenerating a checked-in table, documented in its module)."""

import re

from conftest import ROOT

SOURCES = ["kernels/src", "provider/src", "graph_rewrites/src", "python", "scripts"]
NAME = re.compile(r"[\"'](MXFUSE_[A-Z0-9_]+)[\"']")


def read_in_code():
    names = set()
    for top in SOURCES:
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".rs", ".py", ".sh") and path.is_file():
                names.update(NAME.findall(path.read_text(errors="replace")))
    return {n for n in names if not n.startswith(("MXFUSE_TEST_", "MXFUSE_WRITE_"))}


def test_every_environment_variable_the_code_reads_is_documented():
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    names = read_in_code()
    assert "MXFUSE_CPU_ISA" in names and "MXFUSE_GPU" in names, sorted(names)  # the scan finds them
    missing = sorted(n for n in names if not re.search(rf"\b{n}(?![A-Z0-9_])", docs))
    assert not missing, f"read by the code but in no README.md / docs/*.md: {missing}"
