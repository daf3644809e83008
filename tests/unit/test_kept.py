"""Readings kept on disk (forgetmap.kept): made once per arguments and installation, the same value either way."""

import json

import pytest

from forgetmap import kept as kept_module
from forgetmap.kept import kept

MADE = []


@kept
def _reading(config: str, autocast: bool, frozen: bool = False):
    MADE.append((config, autocast, frozen))
    return (0.5, 1 / 3, len(config))  # a tuple: JSON gives a list back


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGETMAP_ARCHITECTURES", str(tmp_path / "architectures"))
    MADE.clear()
    return tmp_path / "architectures"


def test_a_reading_is_made_once_and_read_back_with_the_value_it_was_made_with(cache):
    first = _reading('{"model_type": "llama"}', True)
    again = _reading('{"model_type": "llama"}', autocast=True, frozen=False)  # the same arguments, bound alike
    assert len(MADE) == 1 and first == again == [0.5, 1 / 3, 23]  # floats exact through JSON, a list both times
    assert len(list(cache.rglob("reading-*.json"))) == 1 and not list(cache.rglob(".*"))  # nothing half-written left
    _reading('{"model_type": "llama"}', True, True)
    _reading('{"model_type": "olmo2"}', True)
    assert len(MADE) == 3  # other arguments: made


def test_another_installation_makes_it_again(cache, monkeypatch):
    _reading("{}", False)
    monkeypatch.setattr(kept_module, "stamp", lambda: "transformers upgraded")
    _reading("{}", False)
    assert len(MADE) == 2 and len(list(cache.rglob("reading-*.json"))) == 2  # one per installation


def test_only_the_four_installations_that_made_a_reading_last_keep_theirs(cache, monkeypatch):
    import os

    for n in range(6):
        monkeypatch.setattr(kept_module, "stamp", lambda n=n: f"installation {n}")
        _reading("{}", False)
        folder = cache / f"installation {n}"[:20]
        os.utime(folder, (1000 + n, 1000 + n))  # made in this order, whatever the clock's resolution
    assert sorted(p.name for p in cache.iterdir()) == [f"installation {n}" for n in (2, 3, 4, 5)]
    assert len(MADE) == 6


def test_a_cache_that_cannot_be_written_is_passed_over(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("FORGETMAP_ARCHITECTURES", str(blocked / "architectures"))
    MADE.clear()
    assert _reading("{}", False) == _reading("{}", False) == [0.5, 1 / 3, 2]
    assert len(MADE) == 2  # made each time, no error


def test_a_damaged_reading_is_made_again(cache):
    _reading("{}", False)
    (path,) = cache.rglob("reading-*.json")
    path.write_text('[0.5, 0.33')  # cut short (a disk that filled up)
    assert _reading("{}", False) == [0.5, 1 / 3, 2] and len(MADE) == 2
    assert json.loads(path.read_text()) == [0.5, 1 / 3, 2]


def test_the_stamp_follows_every_source_file_of_the_package_and_the_libraries_versions(tmp_path, monkeypatch, request):
    request.addfinalizer(kept_module.stamp.cache_clear)  # the real stamp again after the test
    package = tmp_path / "forgetmap"
    (package / "config").mkdir(parents=True)
    (package / "kept.py").write_text("# kept")
    (package / "config" / "fits.py").write_text("# fits")
    monkeypatch.setattr(kept_module, "__file__", str(package / "kept.py"))

    def stamp():
        kept_module.stamp.cache_clear()
        return kept_module.stamp()

    before = stamp()
    assert stamp() == before
    (package / "config" / "fits.py").write_text("# fits, changed")
    changed = stamp()
    assert changed != before
    monkeypatch.setattr(kept_module.metadata, "version", lambda name: "99.0")
    assert stamp() != changed


def test_a_bases_config_is_kept_by_its_text_and_one_that_cannot_be_read_is_named_by_its_own_path(cache, tmp_path):
    from forgetmap.anatomy import pretrained_json

    config = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "vocab_size": 100}
    for where in ("hub-a", "hub-b"):  # the same model in two places: one reading
        (tmp_path / where).mkdir()
        (tmp_path / where / "config.json").write_text(json.dumps(config))
        assert json.loads(pretrained_json(str(tmp_path / where)))["hidden_size"] == 64
    assert len(list(cache.rglob("pretrained_json-*.json"))) == 1
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    with pytest.raises(OSError, match=str(tmp_path / "broken" / "config.json")):
        pretrained_json(str(tmp_path / "broken"))
