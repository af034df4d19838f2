"""deploy/Dockerfile installs kafka-audit as users do: the wheel, non-editable, with the locked dependencies.

A fast check of the file itself (no container engine here runs in `make test`); the image is built and run
with podman by lab/container/build_and_run.sh, recorded in lab/experiments/container-image/README.md.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"
DOCKERIGNORE = REPO / "deploy" / "Dockerfile.dockerignore"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with comments dropped and continuation lines joined."""
    text = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")),
    )
    out = []
    for line in text.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = [[]]
    for ins in instructions():
        if ins[0] == "FROM":
            result.append([])
        result[-1].append(ins)
    return result


def test_the_base_image_is_a_build_argument_defaulting_to_the_public_python_image():
    preamble = stages()[0]
    assert ("ARG", "BASE_IMAGE=python:3.11-slim-bookworm") in preamble
    froms = [args for ins, args in instructions() if ins == "FROM"]
    assert froms and all(f.split()[0] == "${BASE_IMAGE}" for f in froms), froms


def test_the_runtime_stage_installs_the_wheel_non_editable_with_the_locked_dependencies():
    runtime = stages()[-1]
    runs = " && ".join(args for ins, args in runtime if ins == "RUN")
    assert "pip install --no-cache-dir -r /opt/kafka-audit/requirements.lock" in runs
    assert re.search(r"pip install --no-cache-dir --no-deps \S*kafka_audit-\*\.whl", runs)
    assert "pip check" in runs
    assert not re.search(r"pip install[^&]*\s(-e|--editable)\s", runs)
    assert not re.search(r"pip install[^&]*\s\.(\s|$)", runs), "installs the source tree, not the wheel"
    copies = [args for ins, args in runtime if ins == "COPY"]
    assert ("requirements.lock /opt/kafka-audit/requirements.lock") in copies
    # Only built artefacts reach the final image: never the source tree, the lab or the tests.
    for args in copies:
        sources = args.split()[:-1]
        assert sources[0].startswith("--from=build") or sources == ["requirements.lock"], args


def test_the_build_stage_builds_a_wheel_and_the_context_leaves_out_the_lab_and_the_tests():
    build = stages()[1]
    assert build[0] == ("FROM", "${BASE_IMAGE} AS build")
    runs = " && ".join(args for ins, args in build if ins == "RUN")
    assert "pip wheel --no-cache-dir --no-deps --no-build-isolation -w /dist ." in runs
    ignored = {line.strip() for line in DOCKERIGNORE.read_text().splitlines() if not line.startswith("#")}
    assert {"lab", "tests", ".venv", ".git", "var"} <= ignored


def test_pip_takes_an_air_gapped_wheelhouse_from_build_arguments():
    for stage in stages()[1:]:
        args = {a for ins, a in stage if ins == "ARG"}
        assert {"PIP_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"} <= args


def test_the_lock_the_image_installs_pins_every_line():
    lines = [
        line
        for line in (REPO / "requirements.lock").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines and all(re.fullmatch(r"[a-z0-9][a-z0-9._-]*==\S+", line) for line in lines), lines
    names = {line.split("==")[0] for line in lines}
    assert {"torch", "pyspark", "confluent-kafka", "typer"} <= names
    assert not names & {"pytest", "ruff", "hypothesis", "netfilterqueue", "kafka-audit", "kafka-audit-lab"}
