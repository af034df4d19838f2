"""MkDocs hook: pages generated at build time, so they cannot drift from the code.

* ``reference/cli.md``: every command of the ``kafka-audit`` Typer app (``kafka_audit.cli.app``, with the
  commands other packages and the lab register), walked as click commands: usage, help, arguments and
  options with their help and defaults.
* ``reference/settings.md``: every pydantic-settings model (a ``BaseSettings`` subclass) found by walking
  the product packages, with each field's environment variable, type, default and description (the
  class docstring's ``Attributes:`` section, or ``Field(description=...)``).
* ``lab/...``: the experiment records under ``lab/experiments/`` (READMEs, their tables, figures and
  small inputs), copied into the site so the documentation links to them; the repository keeps one copy.

Nothing here is committed; ``mkdocs build`` writes the pages from the code it imports.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import pkgutil
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from kafka_audit import PRODUCT_PACKAGES

log = logging.getLogger("mkdocs.hooks.reference_pages")

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "lab"
LAB_RECORDS = (LAB / "README.md", LAB / "experiments", LAB / "bench" / "results")
"""The lab's description, its experiment records and the benchmark reports, served under ``lab/`` as in the
repository, so relative links between them work on the site and in the repository alike."""
LAB_SUFFIXES = {
    ".md",
    ".png",
    ".svg",
    ".csv",
    ".json",
    ".jsonl",
    ".txt",
    ".yaml",
    ".yml",
    ".sh",
    ".py",
    ".gz",
}


# ------------------------------------------------------------------------------------------- helpers
def _cell(text: object) -> str:
    """One Markdown table cell: no newlines, no unescaped pipes."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: object) -> str:
    s = str(text)
    fence = "``" if "`" in s else "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _strip_rich(text: str) -> str:
    """Drop rich markup (``[bold]...[/bold]``) that Typer help may carry."""
    return re.sub(r"\[/?(bold|italic|dim|red|green|yellow|blue|cyan|magenta|b|i|u)\]", "", text)


# ------------------------------------------------------------------------------------------ CLI page
def _is_sentinel(value: Any) -> bool:
    return (
        value is None
        or callable(value)
        or "sentinel" in type(value).__name__.lower()
        or repr(value).startswith("<")
    )


def _default(param: Any) -> str:
    if getattr(param, "required", False):
        return "required"
    value = getattr(param, "default", None)
    if getattr(param, "is_flag", False) and getattr(param, "secondary_opts", None):
        names = param.opts if value else param.secondary_opts
        return _code(names[0]) if names else ""
    if _is_sentinel(value) or value in ((), []):
        return ""
    if isinstance(value, bool) and getattr(param, "is_flag", False):
        return "on" if value else "off"
    if isinstance(value, (list, tuple)):
        return ", ".join(_code(v) for v in value)
    return _code(value)


def _context(cmd: Any, name: str) -> Any:
    """Return a click context of ``cmd`` (Typer may bring its own copy of click: use the command's class)."""
    return cmd.context_class(cmd, info_name=name)


def _command_section(cmd: Any, path: list[str], out: list[str]) -> None:
    name = " ".join(path)
    level = min(2 + max(len(path) - 2, 0), 4)
    out.append(f"{'#' * level} `{name}`\n")
    help_text = _strip_rich(inspect.cleandoc(cmd.help or cmd.short_help or ""))
    if help_text:
        out.append(help_text.split("\f")[0].strip() + "\n")
    ctx = _context(cmd, name)
    pieces = cmd.collect_usage_pieces(ctx)
    out.append(f"```\n{name} {' '.join(pieces)}\n```\n")
    arguments = [p for p in cmd.params if p.param_type_name == "argument"]
    options = [p for p in cmd.params if p.param_type_name == "option" and not p.hidden and p.name != "help"]
    if arguments:
        out.append("| argument | help | default |\n|---|---|---|")
        for p in arguments:
            name = _code(getattr(p, "metavar", None) or (p.name or "").upper())
            help_ = _cell(_strip_rich(getattr(p, "help", "") or ""))
            out.append(f"| {name} | {help_} | {_cell(_default(p))} |")
        out.append("")
    if options:
        out.append("| option | help | default |\n|---|---|---|")
        for p in options:
            names = ", ".join(_code(o) for o in [*p.opts, *p.secondary_opts])
            help_ = _strip_rich(p.help or "")
            if p.envvar:
                envs = p.envvar if isinstance(p.envvar, (list, tuple)) else [p.envvar]
                help_ += " (env " + ", ".join(envs) + ")"
            out.append(f"| {names} | {_cell(help_)} | {_cell(_default(p))} |")
        out.append("")
    if hasattr(cmd, "list_commands"):
        for sub_name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, sub_name)
            if sub is not None and not getattr(sub, "hidden", False):
                _command_section(sub, [*path, sub_name], out)


def cli_page() -> str:
    """Return ``reference/cli.md``: every command of the ``kafka-audit`` app, walked as click commands."""
    import typer.main

    from kafka_audit.cli import app

    root = typer.main.get_command(app)
    lab_groups = _lab_command_names()
    ctx = _context(root, "kafka-audit")
    out = [
        "# Command line reference\n",
        "Generated from the `kafka-audit` command line itself when this site was built; "
        "`kafka-audit COMMAND --help` prints the same. Settings given on the command line win over the "
        "environment, which wins over the `up --config` file, which wins over the defaults "
        "([settings reference](settings.md)).\n",
        f"```\nkafka-audit {' '.join(root.collect_usage_pieces(ctx))}\n```\n",
        _strip_rich(inspect.cleandoc(root.help or "")) + "\n",
    ]
    product = [n for n in root.list_commands(ctx) if n not in lab_groups]
    lab = [n for n in root.list_commands(ctx) if n in lab_groups]
    for name in product:
        cmd = root.get_command(ctx, name)
        if cmd is not None and not cmd.hidden:
            _command_section(cmd, ["kafka-audit", name], out)
    if lab:
        out.append(
            "## Lab commands\n\nThese come with the lab (`lab/`, installed by `make bootstrap`) through the "
            "`kafka_audit.commands` entry-point group; they need root for network namespaces.\n"
        )
        for name in lab:
            cmd = root.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                _command_section(cmd, ["kafka-audit", name], out)
    return "\n".join(out) + "\n"


def _lab_command_names() -> set[str]:
    """Command names that the lab's entry points add (``testbed``, ``soak``, ``soak-report``...)."""
    from importlib.metadata import entry_points

    import typer

    names: set[str] = set()
    for ep in entry_points(group="kafka_audit.commands"):
        probe = typer.Typer()
        try:
            ep.load()(probe)
        except Exception as exc:  # the page lists what loads
            log.info("CLI reference: entry point %s not loaded: %s", ep.name, exc)
            continue
        names |= {g.name or "" for g in probe.registered_groups}
        names |= {
            (c.name or (c.callback.__name__.replace("_", "-") if c.callback else ""))
            for c in probe.registered_commands
        }
    return names


# ------------------------------------------------------------------------------------- settings page
def _settings_classes() -> list[type]:
    from pydantic_settings import BaseSettings

    found: dict[str, type] = {}
    for package in PRODUCT_PACKAGES:
        try:
            pkg = importlib.import_module(package)
        except Exception as exc:
            log.warning("settings reference: cannot import %s: %s", package, exc)
            continue
        modules = [package]
        for info in pkgutil.walk_packages(getattr(pkg, "__path__", []), prefix=f"{package}."):
            modules.append(info.name)
        for name in modules:
            spec = importlib.util.find_spec(name)
            origin = Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None
            if origin is None or "BaseSettings" not in origin.read_text(encoding="utf-8"):
                continue  # import only modules that can define settings
            try:
                module = importlib.import_module(name)
            except Exception as exc:
                log.warning("settings reference: cannot import %s: %s", name, exc)
                continue
            for obj in vars(module).values():
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, BaseSettings)
                    and obj is not BaseSettings
                    and not obj.__name__.startswith("_")
                    and obj.__module__ == name
                ):
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found, key=lambda k: (found[k].model_config.get("env_prefix", ""), k))]


def _attribute_docs(cls: type) -> dict[str, str]:
    """``name -> description`` from the Google-style ``Attributes:`` section of the class docstring."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    match = re.search(r"^Attributes:\s*$(.*?)(?=^\S|\Z)", doc, flags=re.M | re.S)
    if not match:
        return {}
    body = textwrap.dedent(match.group(1).strip("\n"))
    out: dict[str, str] = {}
    current = None
    for line in body.splitlines():
        item = re.match(r"^(\w+(?:, \w+)*)(?: \([^)]*\))?:\s*(.*)$", line)
        if item and not line.startswith(" "):
            current = item.group(1).split(", ")
            for name in current:
                out[name] = item.group(2)
        elif current:
            for name in current:
                out[name] += " " + line.strip()
    return out


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation)
    text = re.sub(r"\b(?:[a-z_][a-z0-9_]*\.)+(?=[A-Za-z_])", "", text)
    return text.replace("NoneType", "None")


def _field_default(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.is_required():
        return "required"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
    else:
        value = field.default
    if value is PydanticUndefined:
        return ""
    if hasattr(value, "get_secret_value"):
        return "(unset)" if not value.get_secret_value() else "`**********`"
    if hasattr(value, "model_dump"):
        return "(see its section)"
    text = repr(value) if not isinstance(value, str) else value
    if isinstance(value, Path):
        text = str(value).replace(str(Path.home()), "~")
    return _code(text) if text != "" else '`""`'


def settings_page() -> str:
    """Return ``reference/settings.md``: every settings model of the product packages, field by field."""
    out = [
        "# Settings reference\n",
        "Generated from the settings models (pydantic-settings) when this site was built. Every setting is "
        "read, from the highest precedence down, from:\n",
        "1. the command line (the options in the [command line reference](cli.md));",
        "2. the environment (the variables below; a list or mapping is given as JSON);",
        "3. the configuration file of `kafka-audit up --config FILE` (TOML or YAML);",
        "4. the defaults below.\n",
        "Secrets (passwords) are never printed; settings show `**********`.\n",
    ]
    for cls in _settings_classes():
        prefix = cls.model_config.get("env_prefix", "")
        out.append(f"## {cls.__name__}\n")
        summary = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].replace("\n", " ")
        out.append(f"{summary}\n")
        out.append(f"`{cls.__module__}.{cls.__qualname__}`, environment prefix `{prefix}`.\n")
        docs = _attribute_docs(cls)
        out.append("| environment variable | type | default | description |\n|---|---|---|---|")
        for name, field in cls.model_fields.items():
            env = (
                field.validation_alias if isinstance(field.validation_alias, str) else None
            ) or f"{prefix}{name}"
            description = field.description or docs.get(name, "")
            out.append(
                f"| `{env.upper()}` | {_cell(_code(_type_name(field.annotation)))} "
                f"| {_cell(_field_default(field))} "
                f"| {_cell(description)} |"
            )
        out.append("")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------- lab records
def _lab_files(config: Any) -> list[File]:
    files = []
    for record in LAB_RECORDS:
        paths = sorted(record.rglob("*")) if record.is_dir() else [record]
        for path in paths:
            if path.is_file() and path.suffix in LAB_SUFFIXES and "__pycache__" not in path.parts:
                uri = f"lab/{path.relative_to(LAB).as_posix()}"
                files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


# ------------------------------------------------------------------------------------------ the hook
def on_files(files: Files, config: Any) -> Files:
    """Add the generated reference pages and the lab's records to the site's files."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    files.append(File.generated(config, "reference/cli.md", content=cli_page()))
    files.append(File.generated(config, "reference/settings.md", content=settings_page()))
    for f in _lab_files(config):
        files.append(f)
    return files
