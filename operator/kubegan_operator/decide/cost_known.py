"""The job's CostKnown condition: whether the price table prices every node its gang uses.

A machine type or accelerator with no row in the table is never charged as $0 unseen: the
plan names it (Plan.unpriced), the rate counts what is priced, and the job says
`CostKnown=False` (reason NoPrice) with a Warning event, so dashboards and budgets built on
its cost are known to be short.
"""

from __future__ import annotations

from kubegan_api.conditions import ConditionType, Reason

from kubegan_operator.api.rates import unpriced_message
from kubegan_operator.decide.context import Context, current_condition
from kubegan_operator.placement.plan import Plan

PRICED = "every node of the gang is priced by the price table"


def record_cost_known(c: Context, plan: Plan) -> None:
    """CostKnown for the gang just planned; the Warning event only when the news is new
    (another gang on the same unpriced nodes says nothing twice)."""
    if not plan.unpriced:
        c.condition(ConditionType.cost_known, True, Reason.priced, PRICED)
        return
    message = unpriced_message(plan.unpriced)
    was = current_condition(c.st, ConditionType.cost_known)
    if was is None or was.status != "False" or was.message != message:
        c.event("Warning", Reason.no_price, message)
    c.condition(ConditionType.cost_known, False, Reason.no_price, message)
