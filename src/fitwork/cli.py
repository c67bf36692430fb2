"""The `fitwork` command: the group and its commands (each in `fitwork.commands` or its own
package), each imported only when it is the one invoked; the commands parse arguments, call
the library, render; nothing more."""

from __future__ import annotations

import importlib

import click

from fitwork.version import __version__


def _attribute(path: str) -> click.Command:
    """The command at ``module:attribute``."""
    module, _, name = path.partition(":")
    command: click.Command = getattr(importlib.import_module(module), name)
    return command


def _fleet() -> click.Command:
    """`fitwork fleet`, with Kubernetes and Slurm (`fitwork.orchestrate`'s) under it."""
    from fitwork.commands.fleet import fleet
    from fitwork.commands.orchestrate import fleet_k8s, fleet_slurm

    fleet.add_command(fleet_k8s)
    fleet.add_command(fleet_slurm)
    return fleet


def _report() -> click.Command:
    """`fitwork report`, with its --llm section (wired here only)."""
    from fitwork.commands.llm import with_llm_section
    from fitwork.commands.report import report

    return with_llm_section(report)


COMMANDS = {
    "run": lambda: _attribute("fitwork.commands.run:run"),
    "profile": lambda: _attribute("fitwork.commands.fit:profile"),
    "plan": lambda: _attribute("fitwork.commands.fit:plan"),
    "fleet": _fleet,
    "decompose": lambda: _attribute("fitwork.commands.decompose:decompose_command"),
    "demo": lambda: _attribute("fitwork_demo.cli:demo"),
    "deploy": lambda: _attribute("fitwork.commands.orchestrate:deploy"),
    "llm": lambda: _attribute("fitwork.commands.llm:llm"),
    "report": _report,
}
"""Each command's name and how to load it: a run imports what `run` needs, not scipy's
statistics for the LLM commands (the whole set took 1.4 s to import, `run` 0.5 s)."""


class _Lazy(click.Group):
    """A group whose commands are imported when looked up (all of them only for --help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        load = COMMANDS.get(cmd_name)
        return load() if load is not None else None


@click.group(cls=_Lazy, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fitwork")
def main() -> None:
    """fitwork: break a workload into units, fit them to the hardware, run, and measure."""


if __name__ == "__main__":
    main()
