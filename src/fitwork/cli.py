"""The `fitwork` command: the group and its commands (each in `fitwork.commands` or its own
package); the commands parse arguments, call the library, render; nothing more."""

from __future__ import annotations

import click

from fitwork.commands.fit import plan, profile
from fitwork.commands.fleet import fleet
from fitwork.commands.run import run
from fitwork.decomposition.cli import decompose_command
from fitwork.orchestrate.cli import deploy, fleet_k8s, fleet_slurm
from fitwork.report.cli_report import report
from fitwork.version import __version__
from fitwork_demo.cli import demo


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fitwork")
def main() -> None:
    """fitwork: break a workload into units, fit them to the hardware, run, and measure."""


main.add_command(run)
main.add_command(profile)
main.add_command(plan)
main.add_command(fleet)
main.add_command(decompose_command)
main.add_command(demo)
fleet.add_command(fleet_k8s)
fleet.add_command(fleet_slurm)
main.add_command(deploy)

from fitwork.llm.cli import llm, with_llm_section  # noqa: E402 - the LLM group, wired here only

main.add_command(llm)
main.add_command(with_llm_section(report))  # `fitwork report`, and its --llm section


if __name__ == "__main__":
    main()
