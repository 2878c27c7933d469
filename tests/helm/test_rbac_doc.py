"""docs/install.md's "Least-privilege RBAC" table is exactly what the chart grants: the chart is
rendered with every combination of the table's settings (its *with* column), and the rules of
every ClusterRole and Role, one (object, API group, resource, name, verb) at a time, must equal
the table's rows that hold for those settings, either way."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, NamedTuple

import pytest
import yaml

from tests.helm.chart import CHART, ROOT, by_kind, one, template

DOC = ROOT / "docs" / "install.md"
SECTION = "## Least-privilege RBAC"
HEADER = ["object", "with", "API group", "resources", "verbs"]
OBJECTS = {"ClusterRole", "namespaced", "leader"}
NAMED = re.compile(r"^(\S+) \(name: <deployment>\)$")
NAMESPACE = "kubegan-system"

# (object kind, namespace, object name, API group, resource, resource name, verb)
Grant = tuple[str, str, str, str, str, str, str]


class Row(NamedTuple):
    object: str
    setting: tuple[str, Any] | None  # (dotted key, value); None: always
    group: str
    resources: tuple[str, ...]
    named: bool  # limited to the object named like the Deployment
    verbs: tuple[str, ...]


def parse_setting(cell: str) -> tuple[str, Any] | None:
    if cell == "always":
        return None
    found = re.fullmatch(r"`([\w.]+): (.+)`", cell)
    assert found, f"{DOC.name}: 'with' must be always or `key: value`, got {cell!r}"
    return found.group(1), yaml.safe_load(found.group(2))


def parse_row(cells: list[str]) -> Row:
    obj, setting, group, resources, verbs = cells
    assert obj in OBJECTS, f"{DOC.name}: unknown object {obj!r} (one of {sorted(OBJECTS)})"
    named = NAMED.match(resources)
    names = named.group(1) if named else resources
    return Row(
        object=obj,
        setting=parse_setting(setting),
        group="" if group == "core" else group,
        resources=tuple(r.strip() for r in names.split(",")),
        named=bool(named),
        verbs=tuple(v.strip() for v in verbs.split(",")),
    )


def doc_rows(text: str) -> list[Row]:
    """The table under SECTION: a header row, a separator, then one row per rule."""
    section = text.split(SECTION + "\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert cells and cells[0] == HEADER, f"{DOC.name} {SECTION}: no table headed {HEADER}"
    rows = cells[2:]
    twice = [row for i, row in enumerate(rows) if row in rows[:i]]
    assert not twice, f"{DOC.name} {SECTION}: rows listed twice: {twice}"
    return [parse_row(row) for row in rows]


def setting_holds(setting: tuple[str, Any] | None, chosen: dict[str, Any]) -> bool:
    if setting is None:
        return True
    key, value = setting
    return chosen.get(key, default_value(key)) == value


def default_value(key: str) -> Any:
    value: Any = yaml.safe_load((CHART / "values.yaml").read_text())
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def expected_grants(rows: list[Row], chosen: dict[str, Any], deployment: str) -> set[Grant]:
    watched = chosen.get("operator.watchNamespaces", default_value("operator.watchNamespaces"))
    homes = {
        "ClusterRole": [("ClusterRole", "", deployment)],
        "namespaced": [("Role", ns, deployment) for ns in watched]
        or [("ClusterRole", "", deployment)],
        "leader": [("Role", NAMESPACE, f"{deployment}-leader")],
    }
    return {
        (*home, row.group, resource, deployment if row.named else "", verb)
        for row in rows
        if setting_holds(row.setting, chosen)
        for home in homes[row.object]
        for resource in row.resources
        for verb in row.verbs
    }


def rendered_grants(docs: list[dict[str, Any]]) -> set[Grant]:
    grants: set[Grant] = set()
    for role in by_kind(docs, "ClusterRole") + by_kind(docs, "Role"):
        meta = role["metadata"]
        home = (role["kind"], meta.get("namespace", ""), meta["name"])
        for rule in role["rules"]:
            for group, resource, verb in itertools.product(
                rule["apiGroups"], rule["resources"], rule["verbs"]
            ):
                for name in rule.get("resourceNames", [""]):
                    grants.add((*home, group, resource, name, verb))
    return grants


_DEFAULT = object()


def scenarios(rows: list[Row]) -> list[dict[str, Any]]:
    """Every combination of the table's settings: each key left at the chart's default or set
    to one of the values the table names for it (a boolean also to its opposite, so a rule
    that is on by default is seen to go when it is switched off)."""
    values: dict[str, list[Any]] = {}
    for row in rows:
        if not row.setting:
            continue
        key, value = row.setting
        choices = [value, not value] if isinstance(value, bool) else [value]
        known = values.setdefault(key, [])
        known.extend(c for c in choices if c not in known)
    keys = sorted(values)
    return [
        {k: v for k, v in zip(keys, combo, strict=True) if v is not _DEFAULT}
        for combo in itertools.product(*([_DEFAULT, *values[k]] for k in keys))
    ]


ROWS = doc_rows(DOC.read_text())


def render(chosen: dict[str, Any]) -> list[dict[str, Any]]:
    args = [a for k, v in chosen.items() for a in ("--set-json", f"{k}={json.dumps(v)}")]
    return template(*args, namespace=NAMESPACE)


def describe(grants: set[Grant]) -> str:
    return "\n  ".join(" ".join(g or "''" for g in grant) for grant in sorted(grants))


@pytest.mark.parametrize(
    "chosen", scenarios(ROWS), ids=lambda c: json.dumps(c) if c else "defaults"
)
def test_rbac_table_is_what_the_chart_grants(chosen: dict[str, Any]) -> None:
    docs = render(chosen)
    deployment = one(docs, "Deployment")["metadata"]["name"]
    got, want = rendered_grants(docs), expected_grants(ROWS, chosen, deployment)
    assert got == want, (
        f"docs/install.md {SECTION} differs from the chart with {chosen or 'its defaults'}:\n"
        f"granted, not in the table:\n  {describe(got - want)}\n"
        f"in the table, not granted:\n  {describe(want - got)}"
    )


def test_every_value_the_rbac_reads_is_a_setting_of_the_table() -> None:
    """A rule that only some values render is compared only if the table names that value."""
    keys = {row.setting[0] for row in ROWS if row.setting}
    rbac = (CHART / "templates" / "rbac.yaml").read_text()
    read = set(re.findall(r"\.Values\.([\w.]+)", rbac)) - {"rbac.create"}
    assert read, "templates/rbac.yaml reads no values?"
    assert read <= keys, f"{DOC.name} {SECTION}: no row with {sorted(read - keys)}"


def test_a_wrong_table_is_caught() -> None:
    """The comparison is live: a verb the doc lists that the chart does not grant, and a rule
    the doc leaves out, are both differences."""
    docs = render({})
    deployment = one(docs, "Deployment")["metadata"]["name"]
    extra = ROWS[0]._replace(verbs=(*ROWS[0].verbs, "get"))
    assert rendered_grants(docs) != expected_grants([extra, *ROWS[1:]], {}, deployment)
    assert rendered_grants(docs) != expected_grants(ROWS[1:], {}, deployment)
