"""What every section's checks share: naming the key a missing file or bad value came from, and the
config file itself (a key given twice)."""

from __future__ import annotations

import contextlib

from ...errors import ConfigError, ForgetmapError

RESERVED_RUNS = ("base", "example_id", "source", "base_nll")  # run names and matrix label columns


@contextlib.contextmanager
def about(key: str):
    """Reading what `key` points at: a missing or unreadable file becomes a ConfigError naming the key."""
    try:
        yield
    except ConfigError:
        raise
    except (ForgetmapError, OSError, ValueError) as exc:
        raise ConfigError(f"config key {key}: {exc}") from None


def check_duplicate_keys(path: str) -> None:
    """A YAML mapping that names one key twice keeps only the last value (PyYAML, and so Snakemake, say
    nothing): an error naming the file, the key and both lines."""
    import yaml

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges; it names no key
                continue
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(f"{path}: line {key_node.start_mark.line + 1}: key {key!r} is given twice in one "
                                  f"mapping (first at line {seen[key] + 1}); YAML would keep only the last")
            seen[key] = key_node.start_mark.line
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    with open(path) as handle:
        yaml.load(handle, Loader=Strict)
