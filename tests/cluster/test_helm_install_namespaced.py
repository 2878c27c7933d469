"""operator.watchNamespaces: the namespaced rules become a Role in the watched namespace only;
the operator still reconciles a job there end to end with exactly those permissions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.test_helm_install import CLUSTER_WIDE, NAMESPACED, lease_rules
from tests.helm.release import granted, installed, reconcile_end_to_end
from tests.support.kube import Kubectl

pytestmark = pytest.mark.timeout(600)


def test_namespaced_release(cluster: Kubectl, tmp_path: Path) -> None:
    with installed(cluster, tmp_path, watch_own_job_namespace=True) as release:
        assert release.job_namespace != release.namespace
        # Nodes, and pods read-only, stay cluster-wide: free capacity counts every pod.
        outside = CLUSTER_WIDE | {("pods", "list")}
        assert granted(cluster, release.user, release.job_namespace) == NAMESPACED | outside
        assert granted(cluster, release.user, release.namespace) == outside | lease_rules(release)
        assert granted(cluster, release.user, "default") == outside
        reconcile_end_to_end(cluster, release, tmp_path)
