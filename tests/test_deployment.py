"""The deployment files stay true to the CLI: Docker cannot run here, so read them.

Every ``recruiter`` command in ``docker-compose.yml`` is parsed by the real command
line (option names and values, without running it), every environment variable it sets
is one the CLI reads, and the ``bin/`` scripts reach the commands they stand for.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.core
import typer.main
import yaml

from recruiter.cli import app
from recruiter.cli.options import load_registry

ROOT = Path(__file__).parent.parent
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
RECRUITER_SERVICES = {
    name: service
    for name, service in SERVICES.items()
    if service.get("command", [None])[0] == "recruiter"
}


def cli() -> typer.core.TyperGroup:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return group


def parse(arguments: list[str]) -> dict[str, Any]:
    """Parse ``recruiter <arguments>`` as the command line would, without running it."""
    group = cli()
    command = group.get_command(typer.Context(group), arguments[0])
    assert command is not None, f"no command recruiter {arguments[0]}"
    return dict(command.make_context(arguments[0], arguments[1:]).params)


def envvars() -> set[str]:
    """Every environment variable an option of some command reads."""
    group = cli()
    names: set[str] = set()
    for name in group.list_commands(typer.Context(group)):
        command = group.get_command(typer.Context(group), name)
        for parameter in getattr(command, "params", []):
            names.update([parameter.envvar] if isinstance(parameter.envvar, str) else [])
    return names


def test_the_compose_file_runs_the_three_processes_on_a_replica_set() -> None:
    assert {"mongo", "recruiter", "cleaner", "worker"} <= set(SERVICES)
    assert "--replSet" in SERVICES["mongo"]["command"]
    commands = {name: service["command"][1] for name, service in RECRUITER_SERVICES.items()}
    assert commands["recruiter"] == "run"
    assert commands["cleaner"] == "clean"
    assert commands["worker"] == "worker"
    for name, service in RECRUITER_SERVICES.items():
        assert service["depends_on"]["mongo"]["condition"] == "service_healthy", name


@pytest.mark.parametrize("service", sorted(RECRUITER_SERVICES))
def test_each_compose_command_is_valid_for_the_cli(service: str) -> None:
    definition = RECRUITER_SERVICES[service]
    parameters = parse(definition["command"][1:])
    assert parameters, service
    for variable in definition["environment"]:
        assert variable in envvars(), f"{service}: the CLI reads no {variable}"
    app_spec = parameters.get("app_spec")
    if app_spec is not None:
        assert load_registry(app_spec).names(), f"{service}: {app_spec} registers nothing"


def test_the_compose_uri_names_the_replica_set() -> None:
    uri = RECRUITER_SERVICES["recruiter"]["environment"]["MONGODB_URI"]
    assert uri.startswith("mongodb://mongo:27017/")
    assert "replicaSet=rs0" in uri
    assert '_id: "rs0"' in " ".join(SERVICES["mongo"]["healthcheck"]["test"])


def test_an_invalid_command_would_be_caught() -> None:
    with pytest.raises(Exception, match="No such option: --concurency"):
        parse(["worker", "--concurency", "2"])
    with pytest.raises(typer.BadParameter, match="invalid duration '30'"):
        parse(["clean", "--considered-dead-after", "30"])


@pytest.mark.parametrize(
    ("script", "command"), [("recruiter", "run"), ("worker", "worker"), ("cleaner", "clean")]
)
def test_the_bin_scripts_are_the_commands_of_the_original(script: str, command: str) -> None:
    shown = subprocess.run(
        [ROOT / "bin" / script, "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert f"Usage: recruiter {command} [OPTIONS]" in shown
