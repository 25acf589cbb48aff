"""harness.schema.record.read_typed, the reader of the typed records (bisect, window, client-overhead,
serve-crosscheck): version checks, migrations in order, the kind, one-line errors. The record kind
and its model are fakes made up for the test."""

from __future__ import annotations

import json

import pytest

from harness.core.errors import UserError
from harness.schema import record
from harness.schema.base import Frozen


class _Fake(Frozen):
    schema_version: int
    kind: str = "fake"
    a: int
    b: int = 0
    seen: list[int] = []


def _v1_to_2(d, path):
    return {**d, "schema_version": 2, "kind": "fake", "seen": [*d.get("seen", []), 1]}


def _v2_to_3(d, path):
    return {**d, "schema_version": 3, "b": d["a"] * 10, "seen": [*d.get("seen", []), 2]}


MIGRATIONS = {1: _v1_to_2, 2: _v2_to_3}


def _write(tmp_path, data):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(data))
    return p


def test_migrations_run_in_order_from_the_stored_version(tmp_path):
    one = record.read_typed(_write(tmp_path, {"schema_version": 1, "a": 2}), "fake", _Fake, 3,
                            migrations=MIGRATIONS, kind_since=2)
    assert (one.schema_version, one.b, one.seen) == (3, 20, [1, 2])
    two = record.read_typed(_write(tmp_path, {"schema_version": 2, "kind": "fake", "a": 2}), "fake", _Fake, 3,
                            migrations=MIGRATIONS, kind_since=2)
    assert (two.schema_version, two.b, two.seen) == (3, 20, [2])


def test_without_migrations_an_older_version_is_validated_as_it_is(tmp_path):
    rec = record.read_typed(_write(tmp_path, {"schema_version": 1, "kind": "fake", "a": 2}), "fake", _Fake, 3)
    assert (rec.schema_version, rec.b) == (1, 0)


@pytest.mark.parametrize("data, what", [
    ({"schema_version": 4, "kind": "fake", "a": 1}, "schema_version 4 is not one this harness reads (<= 3)"),
    ({"schema_version": 0, "kind": "fake", "a": 1}, "schema_version 0 is not one"),
    ({"schema_version": True, "kind": "fake", "a": 1}, "schema_version True is not one"),
    ({"kind": "fake", "a": 1}, "schema_version None is not one"),
    ({"schema_version": 2, "a": 1}, "not a fake record (no kind)"),
    ({"schema_version": 1, "kind": "other", "a": 1}, "not a fake record"),
    ({"schema_version": 3, "kind": "fake", "a": "x"}, "a: Input should be a valid integer"),
])
def test_refusals_are_one_line_naming_the_file(tmp_path, data, what):
    p = _write(tmp_path, data)
    with pytest.raises(UserError) as e:
        record.read_typed(p, "fake", _Fake, 3, migrations=MIGRATIONS, kind_since=2)
    assert str(e.value).startswith(f"{p}: ") and what in str(e.value) and "\n" not in str(e.value)
