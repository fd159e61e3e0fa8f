"""`ray-cluster.yaml` is a valid Ray cluster launcher config, checked against Ray's own schema."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((ROOT / "ray-cluster.yaml").read_text())


@pytest.fixture(scope="module")
def schema() -> dict:
    import ray

    return json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())


def test_valid_against_rays_schema(config, schema):
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(config)]
    assert errors == []


def test_the_schema_does_catch_mistakes(config, schema):
    """The check above is not vacuous: a misspelt key or a wrong type is refused."""
    validator = jsonschema.Draft7Validator(schema)
    assert list(validator.iter_errors({**config, "max_worker": 4}))
    assert list(validator.iter_errors({**config, "max_workers": "four"}))
    assert list(validator.iter_errors({key: value for key, value in config.items() if key != "provider"}))


def test_node_types_are_consistent(config):
    node_types = config["available_node_types"]
    assert config["head_node_type"] in node_types
    workers = [name for name in node_types if name != config["head_node_type"]]
    assert workers
    for name in workers:
        node = node_types[name]
        assert 0 <= node.get("min_workers", 0) <= node.get("max_workers", config["max_workers"])
        assert node.get("max_workers", 0) <= config["max_workers"]
    assert sum(node_types[name].get("min_workers", 0) for name in workers) <= config["max_workers"]


def test_rays_own_validation_accepts_it(config):
    """Ray's launcher validation (schema plus its own checks, e.g. head_node_type among the node types)."""
    util = pytest.importorskip("ray.autoscaler._private.util")  # private: skip if Ray moves it
    util.validate_config(util.prepare_config(copy.deepcopy(config)))  # fills defaults, as `ray up` does
    broken = {**copy.deepcopy(config), "head_node_type": "no-such-type"}
    with pytest.raises(ValueError, match="head_node_type"):
        util.validate_config(util.prepare_config(broken))


def test_the_project_reaches_every_node(config):
    """The project is copied to the nodes and installed there, so actors find allocator/actors/experiments."""
    mounted = dict(config["file_mounts"])
    assert "." in mounted.values()
    target = next(remote for remote, local in mounted.items() if local == ".")
    assert any(target in command and "pip install" in command for command in config["setup_commands"])
    assert any("--head" in command for command in config["head_start_ray_commands"])
    assert any("--address" in command for command in config["worker_start_ray_commands"])
