"""Loading an instance: validate the file, apply overrides, resolve references against the catalog."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.catalog import Catalog, apply_device_overrides, load_catalog
from planner.errors import InputError, Problem, ProblemCollector
from planner.overrides import apply_overrides
from planner.schema.hardware import DeviceProfile
from planner.schema.instance import DeclaredDevice, Instance, Service
from planner.schema.llm import LLMProfile
from planner.validation import (
    magnitude_problems,
    nonfinite_problems,
    read_mapping,
    validate_mapping,
)


@dataclass(frozen=True)
class ResolvedInstance:
    """An instance whose references all resolve: models, devices (overrides applied), files."""

    instance: Instance
    path: Path
    raw: dict[str, Any]
    """The validated mapping (after overrides), for re-applying further overrides."""
    catalog: Catalog
    devices: dict[str, DeviceProfile]
    """Candidate devices and CPU servers by id, with instance overrides applied."""
    models: dict[str, LLMProfile]
    """Models used by the services, by id."""

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve_path(self, relative: str) -> Path:
        p = Path(relative)
        return p if p.is_absolute() else self.base_dir / p

    def with_overrides(self, overrides: dict[str, Any]) -> ResolvedInstance:
        return resolve_instance(apply_overrides(self.raw, overrides, source=str(self.path)), self.path, self.catalog)


def load_instance(path: str | Path, overrides: dict[str, Any] | None = None, *, scenario: str | None = None) -> ResolvedInstance:
    """Read, validate and resolve an instance file; every problem is reported at once."""
    p = Path(path)
    data = instance_mapping(p, scenario)
    if overrides:
        data = apply_overrides(data, overrides, source=str(p))
    return resolve_instance(data, p, load_catalog(extra=_catalog_path(data, p)))


def instance_mapping(path: str | Path, scenario: str | None = None) -> dict[str, Any]:
    """The instance file's mapping with its named ``scenario``'s overrides applied, not validated (what ``--set`` applies to)."""
    p = Path(path)
    data = read_mapping(p)
    if scenario is not None:
        scenarios = data.get("scenarios") or {}
        if not isinstance(scenarios, dict):
            raise InputError(Problem(str(p), "scenarios", "must be a mapping of scenario name to overrides", "see `planner schema`"))
        if scenario not in scenarios:
            raise InputError(f"scenario {scenario!r} is not defined (defined: {', '.join(map(str, scenarios)) or 'none'})", file=str(p))
        if not isinstance(scenarios[scenario], dict):
            raise InputError(Problem(str(p), f"scenarios.{scenario}", "must be a mapping of dot-path: value", "e.g. services.chat.traffic.rate_multiplier: 1.5"))
        data = apply_overrides(data, scenarios[scenario], source=f"{p} (scenario {scenario})")
    return data


def _catalog_path(data: dict[str, Any], path: Path) -> tuple[Path, ...]:
    """The instance's own catalog folder (``catalog.path``, relative to the instance file), if any."""
    selection = data.get("catalog")
    folder = selection.get("path") if isinstance(selection, dict) else None
    if not isinstance(folder, str) or not folder.strip():
        return ()
    p = Path(folder).expanduser()
    return (p if p.is_absolute() else path.parent / p,)


def _missing_file_problem(rel: str, base: Path) -> str | None:
    """Why ``rel`` (relative to ``base``) is not a readable file, or None if it is."""
    try:
        target = Path(rel) if Path(rel).is_absolute() else base / rel
        if target.is_file():
            return None
    except (OSError, ValueError) as exc:  # e.g. an embedded NUL byte or a too-long name
        return f"file {rel!r} cannot be used as a path ({exc})"
    return f"file {rel!r} does not exist (looked in {target})"


def _override_device(device: DeviceProfile, fields: dict[str, Any], file: str, path: str) -> DeviceProfile:
    """:func:`apply_device_overrides` after checking the shape of the provenance mappings it merges."""
    bad = [key for key in ("sources", "assumptions") if key in fields and not isinstance(fields[key], dict)]
    if bad:
        raise InputError([Problem(file, f"{path}.{key}", f"must be a mapping of field: text, got {type(fields[key]).__name__}", "e.g. rental_usd_per_hour: 'quote from provider X, 2025-06'") for key in bad])
    return apply_device_overrides(device, fields, file, path)


def declared_profile(dev_id: str, decl: DeclaredDevice, file: str) -> DeviceProfile:
    """The :class:`DeviceProfile` of a device declared in the instance (``catalog.declared_devices``):
    price, power and scale-up size, every figure sourced to the declaration; no performance figures,
    so only measured capacity can route traffic to it."""
    figures = {k: v for k, v in decl.model_dump(exclude_unset=True).items() if k not in ("name", "kind", "source")}
    tag = f"declared in {file}: {decl.source}"
    return DeviceProfile(id=dev_id, name=decl.name or dev_id, kind=decl.kind, vendor="declared", **figures,
                         sources={k: tag for k in figures}, confidence="low",
                         notes="declared for a measured-capacity study: no performance profile")


def _encoder_problems(service: str, ref: str, path: Path) -> list[Problem]:
    """The vision tower's config of ``services.<service>.encode.encoder`` (``models/encoders/`` or a path) must load."""
    import dataclasses

    from planner.perf.encoder import load_encoder

    try:
        load_encoder(ref, path.parent)
    except InputError as exc:
        return [dataclasses.replace(p, file=str(path), path=f"services.{service}.encode.encoder") for p in exc.problems]
    return []


_TOWER_MESSAGE = "tower: its encoder work"


def _model_fix(problem: Problem, has_encode: bool) -> str:
    """The fix of a model problem; a config.json with a vision tower on a service that sets ``encode``
    is sent to the catalog profile of its language model plus ``encode.encoder`` (the encode phase is
    modelled there), not to a text-only checkpoint."""
    if has_encode and _TOWER_MESSAGE in problem.message:
        return ("the encode phase is modelled through encode.encoder: give the language model's catalog profile as model "
                "(e.g. qwen2.5-vl-7b; `planner catalog models`) and this config.json (or a models/encoders/ id such as "
                "Qwen--Qwen2.5-VL-7B-Instruct) as encode.encoder")
    return problem.fix


def _model_problem(problem: Problem, has_encode: bool) -> tuple[str, str]:
    """(message, fix) of a problem raised while resolving ``services.<name>.model``."""
    text = problem.message
    if has_encode and _TOWER_MESSAGE in text:  # the encode phase is modelled: say what is not
        text = text.split(": its encoder work", 1)[0] + ": a vision-language config.json is not read as the model (only a text-only config is)"
    message = text if not problem.file else f"{problem.file}: {problem.path + ': ' if problem.path else ''}{text}"
    return message, _model_fix(problem, has_encode)


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object read from ``path``; None when it cannot be read (reported elsewhere)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _block(cfg: dict[str, Any], key: str) -> dict[str, Any]:
    """The nested mapping ``cfg[key]`` of a config.json (empty when absent or not a mapping)."""
    value = cfg.get(key)
    return value if isinstance(value, dict) else {}


def _shipped_config(model: LLMProfile, catalog: Catalog) -> Path | None:
    """The ``models/llm/configs/`` copy of the profile's checkpoint config: its ``hf_id``, else the one
    config whose name normalises to the same model (``Meta-Llama-3.1-70B`` for ``Llama-3.1-70B``)."""
    from planner.perf.names import normalise_model

    if not model.hf_id:
        return None
    configs = catalog.shipped_configs()
    if model.hf_id.lower() in configs:
        return configs[model.hf_id.lower()]
    base = normalise_model(model.hf_id)[0]
    matches = [path for hf, path in configs.items() if normalise_model(hf)[0] == base]
    return matches[0] if len(matches) == 1 else None


def mtp_layers(ref: str, model: LLMProfile, catalog: Catalog, base: Path) -> int | None:
    """Multi-token-prediction modules of the checkpoint (``num_nextn_predict_layers`` of its config.json:
    the file given as ``model``, else the copy ``models/llm/configs/`` ships for the profile's ``hf_id``);
    None when no config is found. Profiles do not record the module (DeepSeek-V3's ``num_layers`` is the
    61 main layers)."""
    given = Path(ref.strip()).expanduser()
    if ref.strip().lower().endswith(".json"):
        path: Path | None = given if given.is_absolute() else base / given
    else:
        path = _shipped_config(model, catalog)
    cfg = _read_json(path) if path is not None else None
    if cfg is None:
        return None
    value = cfg.get("num_nextn_predict_layers", _block(cfg, "text_config").get("num_nextn_predict_layers", 0))
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _mtp_problems(where: str, svc: Service, model: LLMProfile, catalog: Catalog, base: Path, file: str) -> list[Problem]:
    layers = mtp_layers(svc.model, model, catalog, base)
    if layers:
        return []
    why = ("its config.json has no num_nextn_predict_layers" if layers == 0
           else "no config.json of it is found to show one (models/llm/configs/ ships none for its hf_id)")
    return [Problem(file, f"{where}.method", f"method mtp needs the model's own multi-token-prediction module, and {svc.model} has none "
                    f"recorded ({why}; DeepSeek-V3 has one)",
                    "use method eagle (an EAGLE draft head), draft_model (a smaller model of the same family, with draft_model: <catalog id>) or ngram")]


def _draft_problems(where: str, name: str, svc: Service, model: LLMProfile, catalog: Catalog, models: dict[str, LLMProfile], path: Path) -> list[Problem]:
    """The draft of ``method: draft_model`` must be known (the message solve gives), share the target's
    tokenizer (the same ``vocab_size``) and be smaller than the target."""
    from planner.perf.speculative import find_draft

    spec = svc.speculative
    assert spec is not None
    try:
        draft = find_draft(catalog.models, models, str(path), name, spec)
    except InputError as exc:
        return list(exc.problems)
    if draft is None:
        return []
    file = str(path)
    problems = []
    if draft.vocab_size != model.vocab_size:
        problems.append(Problem(file, f"{where}.draft_model", f"draft {spec.draft_model} has a vocabulary of {draft.vocab_size:,} tokens and "
                                f"{svc.model} one of {model.vocab_size:,}: speculative decoding needs the same tokenizer",
                                "use a draft of the target's family (same vocab_size; `planner catalog models`), or method eagle / ngram"))
    if draft.params_total() >= model.params_total():
        problems.append(Problem(file, f"{where}.draft_model", f"draft {spec.draft_model} ({draft.params_total() / 1e9:.1f} B parameters) is not "
                                f"smaller than the target {svc.model} ({model.params_total() / 1e9:.1f} B): it cannot propose tokens faster than the target decodes",
                                "use a smaller model of the target's family as draft_model, or method eagle / ngram"))
    return problems


def _speculative_problems(name: str, svc: Service, model: LLMProfile, catalog: Catalog, models: dict[str, LLMProfile], path: Path) -> list[Problem]:
    spec = svc.speculative
    where = f"services.{name}.speculative"
    if spec is None:
        return []
    if spec.method == "mtp":
        return _mtp_problems(where, svc, model, catalog, path.parent, str(path))
    if spec.method == "draft_model":
        return _draft_problems(where, name, svc, model, catalog, models, path)
    return []


def encoder_out_width(ref: str, base: Path) -> int | None:
    """Width of the embeddings the tower hands the LLM, as its config records it
    (:func:`planner.perf.encoder.recorded_out_width`, the width the encode phase prices); None when not recorded
    or the config cannot be read."""
    from planner.perf.encoder import encoder_path, recorded_out_width

    try:
        cfg = _read_json(encoder_path(ref, base))
    except InputError:
        return None
    return None if cfg is None else recorded_out_width(cfg)


def _encoder_width_problems(name: str, svc: Service, model: LLMProfile, path: Path) -> list[Problem]:
    """The tower's output embeddings must be as wide as the model's hidden size (they replace token embeddings)."""
    if svc.encode is None:
        return []
    width = encoder_out_width(svc.encode.encoder, path.parent)
    if width is None or width == model.hidden_size:
        return []
    return [Problem(str(path), f"services.{name}.encode.encoder",
                    f"encoder {svc.encode.encoder} hands the LLM embeddings of width {width:,} (its out_hidden_size) but {svc.model}'s "
                    f"hidden size is {model.hidden_size:,}: the tower does not belong to this model",
                    "give the encoder of this model's vision-language checkpoint, or a vision-language model (e.g. qwen2.5-vl-7b) whose hidden size matches")]


def _length_problems(name: str, svc: Service, model: LLMProfile, file: str) -> list[Problem]:
    """Hand-written ``traffic.lengths`` whose input + output tokens (after the length multipliers) exceed the context."""
    t, ctx = svc.traffic, model.max_context_tokens
    problems = []
    for i, b in enumerate(t.lengths or []):
        need = b.input_tokens * t.input_length_multiplier + b.output_tokens * t.output_length_multiplier
        if need <= ctx:
            continue
        scaled = "" if t.input_length_multiplier == t.output_length_multiplier == 1.0 else " (after the length multipliers)"
        problems.append(Problem(file, f"services.{name}.traffic.lengths[{i}]",
                                f"input {b.input_tokens:,} + output {b.output_tokens:,} tokens{scaled} = {need:,.0f} exceed the context of "
                                f"{svc.model} ({ctx:,} tokens, max_context_tokens): an engine rejects such requests",
                                f"keep input + output within {ctx:,} tokens, or plan a model with a longer context"))
    return problems


def _raw_reference_problems(data: dict[str, Any], path: Path, catalog: Catalog) -> list[Problem]:
    """Reference checks on the raw mapping, for when the schema already failed.

    Lets one run report a misspelt key *and* an unknown model or device or a missing trace
    together (STYLE §8). Only looks at values of the expected shape; anything else is
    already a schema problem.
    """
    file = str(path)
    problems = ProblemCollector(file=file)
    services = data.get("services")
    if isinstance(services, dict):
        for name, svc in services.items():
            if not isinstance(svc, dict):
                continue
            model = svc.get("model")
            if isinstance(model, str):
                try:
                    catalog.resolve_model(model, path.parent)
                except InputError as exc:
                    for p in exc.problems:
                        problems.add(f"services.{name}.model", *_model_problem(p, isinstance(svc.get("encode"), dict)))
            encode = svc.get("encode")
            if isinstance(encode, dict) and isinstance(encode.get("encoder"), str) and encode["encoder"]:
                problems.extend(_encoder_problems(str(name), encode["encoder"], path))
            traffic = svc.get("traffic")
            if isinstance(traffic, dict):
                for key in ("trace", "profile"):
                    rel = traffic.get(key)
                    if isinstance(rel, str):
                        why = _missing_file_problem(rel, path.parent)
                        if why:
                            problems.add(f"services.{name}.traffic.{key}", why, "give a path relative to the instance file")
    selection = data.get("catalog")
    if isinstance(selection, dict):
        for key in ("devices", "cpu_servers"):
            ids = selection.get(key)
            if isinstance(ids, list):
                declared = selection.get("declared_devices")
                declared = declared if isinstance(declared, dict) else {}
                for i, dev_id in enumerate(ids):
                    if isinstance(dev_id, str) and dev_id not in catalog.devices and dev_id not in declared:
                        problems.add(f"catalog.{key}[{i}]", f"unknown device {dev_id!r}", catalog.choices("device"))
        overrides = selection.get("device_overrides")
        if isinstance(overrides, dict):
            for dev_id, fields in overrides.items():
                if isinstance(dev_id, str) and dev_id in catalog.devices and isinstance(fields, dict):
                    try:
                        _override_device(catalog.devices[dev_id], fields, file, f"catalog.device_overrides.{dev_id}")
                    except InputError as exc:
                        problems.extend(exc.problems)
    return problems.problems


def resolve_instance(data: dict[str, Any], path: Path, catalog: Catalog) -> ResolvedInstance:
    file = str(path)
    problems = ProblemCollector(file=file)
    nonfinite = nonfinite_problems(data, file)
    try:
        instance = validate_mapping(Instance, data, file)
    except InputError as exc:
        # an inf/nan also breaks a bound or a type: "not a finite number" says it best
        bad_numbers = {p.path for p in nonfinite}
        problems.extend([p for p in exc.problems if p.path not in bad_numbers])
        problems.extend(nonfinite)
        problems.extend(_raw_reference_problems(data, path, catalog))
        raise InputError(problems.problems) from exc
    problems.extend(nonfinite)
    problems.extend(magnitude_problems(instance.model_dump(exclude={"scenarios", "forecasts"}), file))
    models: dict[str, LLMProfile] = {}
    for name, svc in instance.services.items():
        where = f"services.{name}"
        if svc.encode is not None:
            problems.extend(_encoder_problems(name, svc.encode.encoder, path))
        model: LLMProfile | None = None
        try:
            model = catalog.resolve_model(svc.model, path.parent)
        except InputError as exc:
            for p in exc.problems:
                problems.add(f"{where}.model", *_model_problem(p, svc.encode is not None))
        if model is not None:
            models[svc.model] = model
            problems.extend(_length_problems(name, svc, model, file))
            problems.extend(_encoder_width_problems(name, svc, model, path))
            if svc.weight_precision not in model.supported_weight_precisions:
                problems.add(f"{where}.weight_precision", f"{svc.model} is not published at {svc.weight_precision}", f"use one of: {', '.join(model.supported_weight_precisions)}")
            if svc.kv_precision_resolved not in model.supported_kv_precisions:
                problems.add(f"{where}.kv_precision", f"KV precision {svc.kv_precision_resolved} not supported for {svc.model}", f"use one of: {', '.join(model.supported_kv_precisions)}")
        for key in ("trace", "profile"):
            rel = getattr(svc.traffic, key)
            if rel is not None:
                why = _missing_file_problem(rel, path.parent)
                if why:
                    problems.add(f"{where}.traffic.{key}", why, "give a path relative to the instance file")
        for tool, stats in svc.tools.items():
            if stats.latency.p50_ms <= 0 and stats.calls_per_request > 0:
                problems.add(f"{where}.tools.{tool}.latency.p50_ms", "a tool that is called must have a positive latency", "give measured latencies in ms")
    if instance.calibration is not None:
        why = _missing_file_problem(instance.calibration, path.parent)
        if why:
            problems.add("calibration", why, "give the file `planner calibrate` wrote, relative to the instance file")
    devices: dict[str, DeviceProfile] = {}
    sel = instance.catalog
    for key, ids in (("devices", sel.devices), ("cpu_servers", sel.cpu_servers)):
        for i, dev_id in enumerate(ids):
            where = f"catalog.{key}[{i}]"
            dev = catalog.devices.get(dev_id)
            if key == "devices" and dev_id in sel.declared_devices:
                decl = sel.declared_devices[dev_id]
                if dev is not None:
                    problems.add(f"catalog.declared_devices.{dev_id}", f"{dev_id} is a catalog device",
                                 f"remove the declaration; change its figures under catalog.device_overrides.{dev_id}")
                    continue
                price = decl.rental_usd_per_hour if sel.pricing == "rent" else decl.purchase_usd
                if price is None:
                    field = "rental_usd_per_hour" if sel.pricing == "rent" else "purchase_usd"
                    problems.add(f"catalog.declared_devices.{dev_id}.{field}", f"declared device {dev_id} has no {field} but catalog.pricing is {sel.pricing!r}",
                                 f"give catalog.declared_devices.{dev_id}.{field}")
                    continue
                devices[dev_id] = declared_profile(dev_id, decl, file)
                continue
            if dev is None:
                hint = catalog.choices("device")
                if key == "devices":
                    hint += f"; or declare it (measured-capacity studies) under catalog.declared_devices.{dev_id}"
                problems.add(where, f"unknown device {dev_id!r}", hint)
                continue
            if key == "devices" and dev.kind == "cpu":
                problems.add(where, f"{dev_id} is a CPU server", "list it under catalog.cpu_servers")
                continue
            if key == "cpu_servers" and dev.kind != "cpu":
                problems.add(where, f"{dev_id} is not a CPU server", "list it under catalog.devices")
                continue
            if dev_id in sel.device_overrides:
                try:
                    dev = _override_device(dev, sel.device_overrides[dev_id], file, f"catalog.device_overrides.{dev_id}")
                except InputError as exc:
                    problems.extend(exc.problems)
                    continue
            missing = dev.missing_for_serving()
            if missing:
                problems.add(where, f"profile {dev_id} is incomplete: missing {', '.join(missing)}", f"supply them under catalog.device_overrides.{dev_id}")
            if sel.pricing == "rent" and dev.rental_usd_per_hour is None and not missing:
                problems.add(where, f"{dev_id} has no rental price but catalog.pricing is 'rent'", f"set catalog.device_overrides.{dev_id}.rental_usd_per_hour or use pricing: buy")
            if sel.pricing == "buy" and dev.purchase_usd is None and not missing:
                problems.add(where, f"{dev_id} has no purchase price but catalog.pricing is 'buy'", f"set catalog.device_overrides.{dev_id}.purchase_usd or use pricing: rent")
            devices[dev_id] = dev
    for dev_id in sel.declared_devices:
        if dev_id not in sel.devices:
            problems.add(f"catalog.declared_devices.{dev_id}", "declares a device that is not a candidate", "add it to catalog.devices or remove the declaration")
        if dev_id in sel.device_overrides:
            problems.add(f"catalog.device_overrides.{dev_id}", "overrides a declared device", f"set the figures in catalog.declared_devices.{dev_id}")
    for dev_id in sel.device_overrides:
        if dev_id in sel.declared_devices:
            continue
        if dev_id not in sel.devices and dev_id not in sel.cpu_servers:
            problems.add(f"catalog.device_overrides.{dev_id}", "overrides a device that is not a candidate", "add it to catalog.devices or remove the override")
    for name, overrides in instance.scenarios.items():
        try:
            trial = apply_overrides({k: v for k, v in data.items() if k != "scenarios"}, overrides, source=file)
        except InputError as exc:  # a path that cannot be applied: name the scenario it is in
            problems.extend([replace(p, path=f"scenarios.{name}.{p.path}" if p.path else f"scenarios.{name}") for p in exc.problems])
            continue
        try:
            validate_mapping(Instance, trial, file, prefix=f"scenarios.{name}")
        except InputError as exc:
            problems.extend(exc.problems)
    for name, svc in instance.services.items():
        if svc.model in models:
            problems.extend(_speculative_problems(name, svc, models[svc.model], catalog, models, path))
    problems.raise_if_any()
    return ResolvedInstance(instance=instance, path=path, raw=data, catalog=catalog, devices=devices, models=models)
