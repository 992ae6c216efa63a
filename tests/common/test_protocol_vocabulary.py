"""One protocol vocabulary: Kafka's error codes (`common.errors.Errors`) and API keys
(`common.api_keys.ApiKey`) exist once.

They were generated from kio (itself generated from Kafka's JSON schemas); these tests
keep them from drifting from kio, and keep copies from growing back elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from common.api_keys import ApiKey
from common.errors import Errors, error_name

ROOT = Path(__file__).resolve().parents[2]


def test_errors_agree_with_kio() -> None:
    ours = {e.value: (e.name, e.retriable) for e in Errors}
    kios = {e.value: (e.name.upper(), e.retriable) for e in ErrorCode}
    assert ours == kios


def test_api_keys_agree_with_kio() -> None:
    assert {k.value: k.name.lower() for k in ApiKey} == dict(api_key_map)


def test_error_name() -> None:
    assert error_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert error_name(9999) == "error code 9999"


def test_members_are_plain_ints_on_the_wire() -> None:
    """IntEnum members encode as their code (struct, kio, msgspec)."""
    import struct

    import msgspec

    assert struct.pack(">h", Errors.NOT_LEADER_OR_FOLLOWER) == struct.pack(">h", 6)
    assert msgspec.json.encode({"error_code": Errors.UNKNOWN_SERVER_ERROR}) == b'{"error_code":-1}'
    assert ErrorCode(Errors.FENCED_LEADER_EPOCH) is ErrorCode.fenced_leader_epoch


def _packages() -> list[Path]:
    """Our production packages: every top-level folder with an __init__.py, except
    common/ (the vocabulary's home) and tests/."""
    return sorted(
        p
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and p.name not in ("common", "tests")
    )


def _int_constants(tree: ast.Module) -> list[tuple[str, int]]:
    """(name, line) of module-level NAME = <int> assignments (tuples included)."""

    def is_int(node: ast.expr) -> bool:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) is int

    out = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign | ast.AnnAssign):
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        value = stmt.value
        for target in targets:
            if isinstance(target, ast.Name) and value is not None and is_int(value):
                out.append((target.id, stmt.lineno))
            elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                for t, v in zip(target.elts, value.elts, strict=False):
                    if isinstance(t, ast.Name) and is_int(v):
                        out.append((t.id, stmt.lineno))
    return out


def test_no_error_code_copies_outside_common() -> None:
    """`NOT_LEADER_OR_FOLLOWER = 6` anywhere but common/ is a second copy of Errors."""
    names = set(Errors.__members__)
    found = []
    for package in _packages():
        for path in sorted(package.rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for name, line in _int_constants(tree):
                if name in names:
                    found.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not found, "error codes defined outside common/errors.py:\n" + "\n".join(found)
