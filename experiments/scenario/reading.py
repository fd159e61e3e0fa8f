"""Reading a scenario: YAML with a strict loader, dotted overrides, then the whole file checked section by section."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from experiments import checks
from experiments.errors import ScenarioError
from experiments.scenario import clients, converter, events, generation, pulsar_wire, sections, transport
from experiments.scenario.spec import ChannelSpec, CleanupSpec, FallbackSpec, GroupSpec, RealtimeSpec, Scenario
from experiments.user_files import UnreadableFileError, read_capped


def load_scenario(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Read, override and validate the scenario file at `path`; trace files are relative to its folder."""
    data = read_scenario(path)
    if overrides:
        data = apply_overrides(data, overrides)
    return parse_scenario(data, str(path))


def read_scenario(path: str | Path) -> dict[str, Any]:
    """The raw mapping of the scenario file at `path`, not yet validated (a sweep overrides it first)."""
    source = str(path)
    return _top_level(read_yaml(Path(path), source), source)


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate the raw mapping of a scenario file.

    `source` names the file in errors, and trace files are read relative to its folder (the current
    directory for the default '<scenario>').
    """
    try:
        return _scenario(_top_level(data, source), Path(source).parent)
    except checks.FieldError as invalid:
        raise ScenarioError(source, invalid.key, invalid.problem) from None


def apply_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of `data` with each dotted key of `overrides` set, creating mappings on the way.

    `{"policy.params.steal_fraction": 0.25}` sets `data["policy"]["params"]["steal_fraction"]`; an item of a list
    is written as in error messages, `groups[0].quota.publish_msgs_per_s.ramp_up.mode` (the list and the item
    must exist). Values are taken as given (parse command-line strings with `yaml.safe_load` first); validation
    comes after.
    """
    result = copy.deepcopy(dict(data))
    for dotted, value in overrides.items():
        steps = _override_steps(dotted)
        node: Any = result
        for depth in range(len(steps) - 1):
            node = _override_child(node, steps[depth : depth + 2], dotted, _override_key(steps[: depth + 1]))
        if isinstance(steps[-1], int) and steps[-1] >= len(node):
            raise ScenarioError("override", dotted, f"{_override_key(steps)}: no such item")
        node[steps[-1]] = copy.deepcopy(value)
    return result


def _override_child(node: Any, step_and_next: list[str | int], dotted: str, where: str) -> Any:
    """The child of `node` at `step` (a mapping is created where missing), checked to be a list when `next`
    is an index and a mapping when it is a key."""
    step, next_step = step_and_next
    if isinstance(step, int):
        if step >= len(node):
            raise ScenarioError("override", dotted, f"{where}: no such item")
        child = node[step]
    else:
        child = node.setdefault(step, {})
    wanted, name = (list, "a list") if isinstance(next_step, int) else (dict, "a mapping")
    if not isinstance(child, wanted):
        raise ScenarioError("override", dotted, f"{where} holds {checks.show(child)}, not {name}")
    return child


_OVERRIDE_PART = re.compile(r"([^.\[\]]+)((?:\[\d+\])*)")


def _override_steps(dotted: str) -> list[str | int]:
    """`groups[0].quota` -> ["groups", 0, "quota"]."""
    steps: list[str | int] = []
    if dotted.count(".") + dotted.count("[") >= MAX_DEPTH:
        raise ScenarioError("override", checks.show(dotted), f"nested too deeply (more than {MAX_DEPTH} levels)")
    for part in dotted.split("."):
        match = _OVERRIDE_PART.fullmatch(part)
        if match is None:
            problem = "not a dotted key like policy.params.steal_fraction or groups[0].name"
            raise ScenarioError("override", dotted, problem)
        steps.append(match.group(1))
        steps += [int(index) for index in re.findall(r"\d+", match.group(2))]
    return steps


def _override_key(steps: list[str | int]) -> str:
    key = ""
    for step in steps:
        key = checks.at(key, step)
    return key


MAX_FILE_BYTES = 16 * 2**20  # a generated scenario is a few lines; 16 MiB hold 200,000 hand-written brokers
MAX_DEPTH = 32  # nodes from the top to the deepest value; a scenario needs 7 (events[0].channel.partitions[0][0])


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML keeps the last silently), nesting deeper than MAX_DEPTH
    (PyYAML composes recursively: 5,000 levels are a RecursionError) and scalars its constructors cannot read
    (`2001-13-45`, `!!int x`), each with its line; and reads `1e3` as a float."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                problem = f"nested too deeply (more than {MAX_DEPTH} levels)"
                raise yaml.composer.ComposerError(None, None, problem, self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, KeyError) as error:  # e.g. datetime's "month must be in 1..12", bool's KeyError
            problem = f"not a valid {node.tag.rsplit(':', 1)[-1]}: {error}"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool):
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 wants a dot and a signed exponent (1.0e+3); YAML 1.2 and every user also mean 1e3 and 1.5e-2.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


def read_yaml(path: Path, source: str) -> Any:
    """The YAML document at `path` (strict: no duplicate keys); a problem is a `ScenarioError` naming `source`."""
    try:
        data = read_capped(path, MAX_FILE_BYTES)
    except UnreadableFileError as problem:
        raise ScenarioError(source, "", str(problem)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(source, "", "not a UTF-8 text file") from None
    return _load_yaml(text, source)


def _load_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(str(error.problem or error.context).split())
        raise ScenarioError(source, where, f"invalid YAML: {problem}") from None
    except yaml.YAMLError as error:
        raise ScenarioError(source, "", f"invalid YAML: {' '.join(str(error).split())}") from None


def parse_override(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` from the command line (`quotalab run --set`): the value read as YAML by the same strict loader
    as a file (`0.3`, `1e3`, `true`, `[a, b]`, `interest`; at most MAX_DEPTH levels deep). A problem is a
    `ScenarioError` naming `--set KEY`, the value never repeated whole."""
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise ScenarioError("--set", checks.show(text), "expected KEY=VALUE, e.g. channel.loss=0.3")
    return key, _load_yaml(value, f"--set {checks.show(key)}")


def _top_level(data: Any, source: str) -> dict[str, Any]:
    if data is None:
        raise ScenarioError(source, "", "the scenario is empty")
    if not isinstance(data, dict):
        raise ScenarioError(source, "", f"a scenario must be a mapping of keys, got {checks.kind_of(data)}")
    return data


def _scenario(top: dict[str, Any], base_dir: Path) -> Scenario:
    checks.mapping(top, "", converter.names(Scenario), required=("name",))
    settings = converter.plain_fields(Scenario, top, "")
    checks.file_name(settings["name"], "name")
    context = sections.Context(rounds=settings.get("rounds", Scenario.rounds), base_dir=base_dir)
    if "generated" in top:
        for clash in ("groups", "brokers"):
            if clash in top:
                raise checks.FieldError(clash, "cannot be given with 'generated', which writes the groups and brokers")
        seed = settings.get("seed", Scenario.seed)
        groups, brokers, generated = generation.generated(top["generated"], "generated", seed)
    else:
        for missing in ("groups", "brokers"):
            if missing not in top:
                raise checks.FieldError(missing, "required (or a 'generated' block)")
        groups = sections.groups(top["groups"], "groups")
        brokers = sections.brokers(top["brokers"], "brokers", replace(context, groups=sections.by_name(groups)))
        generated = None
    cleanup = converter.plain_section(CleanupSpec, top.get("cleanup", {}), "cleanup")
    broker_names = sections.by_name(brokers)
    reporting = sections.reporting(top.get("reporting", {}), "reporting", base_dir, tuple(broker_names))
    mode = settings.get("mode", Scenario.mode)
    context = replace(
        context,
        groups=sections.by_name(groups),
        brokers=broker_names,
        membership=cleanup.membership,
        signed=reporting.signed,
        mode=mode,
    )
    membership = sections.membership(top.get("membership", {}), "membership", mode)
    channel = ChannelSpec(**sections.channel(top.get("channel", {}), "channel", context))
    transport.check_channel(channel, mode, "channel")
    context = replace(context, own_redis=transport.own_server(channel, membership))
    _check_ramps(groups, settings.get("interval_s", Scenario.interval_s))
    throttle = clients.throttle(top.get("throttle", {}), "throttle", settings.get("interval_s", Scenario.interval_s))
    scenario = Scenario(
        **settings,
        groups=groups,
        brokers=brokers,
        policy=sections.policy(top.get("policy", {}), "policy"),
        reporting=reporting,
        cleanup=cleanup,
        membership=membership,
        channel=channel,
        events=events.events(top.get("events", []), "events", context, brokers),
        realtime=converter.plain_section(RealtimeSpec, top.get("realtime", {}), "realtime"),
        fallback=_fallback(top.get("fallback", {}), "fallback", reporting.force_every),
        generated=generated,
        throttle=throttle,
        clients=clients.clients(top.get("clients", []), "clients", context, throttle.step_ms),
    )
    pulsar_wire.check(scenario)
    return scenario


def _check_ramps(groups: tuple[GroupSpec, ...], interval_s: float) -> None:
    """A ramp steps once per 1-s epoch with requests: a round longer than an epoch would skip epochs."""
    for index, group in enumerate(groups):
        for dim in group.ramp_up:
            if interval_s > 1:
                key = checks.at(checks.at(checks.at(checks.at("groups", index), "quota"), dim), "ramp_up")
                raise checks.FieldError(key, f"needs interval_s <= 1 (a ramp's epochs are 1 s), got {interval_s:g}")


def _fallback(raw: object, key: str, force_every: int) -> FallbackSpec:
    """The fallback; it must wait longer than a quiet peer's forced reports are apart."""
    spec = converter.plain_section(FallbackSpec, raw, key)
    if spec.mode != "none" and spec.after_rounds <= force_every:
        raise checks.FieldError(
            checks.at(key, "after_rounds"),
            f"must be > reporting.force_every ({force_every}): a peer whose usage does not change reports only "
            f"every force_every rounds, got {spec.after_rounds}",
        )
    return spec
