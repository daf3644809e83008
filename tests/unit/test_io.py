"""Output files (forgetmap.io): whole or nothing, and readable as the umask says."""

import os
import stat

import pyarrow as pa
import pytest

from forgetmap.io import atomic_path, write_table


@pytest.fixture
def group_umask():
    """A lab's shared cluster: group members read (and, with 002, write) what the run writes."""
    previous = os.umask(0o002)
    yield 0o002
    os.umask(previous)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_and_directories_get_the_mode_the_umask_gives(tmp_path, group_umask):
    write_table(pa.table({"x": [1]}), tmp_path / "t.parquet")
    with atomic_path(tmp_path / "text.json") as tmp:
        tmp.write_text("{}")
    with atomic_path(tmp_path / "checkpoint", directory=True) as tmp:
        (tmp / "weights.bin").write_bytes(b"0")
        (tmp / "shards").mkdir()
        private = tmp / "shards" / "model.safetensors"  # as transformers saves weights: a private temporary file
        private.write_bytes(b"0")
        private.chmod(0o600)
    assert mode(tmp_path / "t.parquet") == mode(tmp_path / "text.json") == 0o664
    assert mode(tmp_path / "checkpoint") == mode(tmp_path / "checkpoint/shards") == 0o775
    assert mode(tmp_path / "checkpoint/weights.bin") == mode(tmp_path / "checkpoint/shards/model.safetensors") == 0o664
    os.umask(0o077)  # a private umask stays private
    write_table(pa.table({"x": [1]}), tmp_path / "private.parquet")
    assert mode(tmp_path / "private.parquet") == 0o600


def test_a_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "out.parquet") as tmp:
            tmp.write_text("half")
            raise RuntimeError("the job failed")
    assert list(tmp_path.iterdir()) == []
