"""TensorFlow jobs on a TPU slice: the trainer-tf-tpu image by default, and the slice's
environment as GKE documents it for multi-host TPU workloads, so that libtpu (through
TPUClusterResolver("local")) finds its peers. GKE's definitions (GKE's "Deploy TPU workloads"
page, https://cloud.google.com/kubernetes-engine/docs/how-to/tpus; quoted word for word at
https://beta.pkg.go.dev/github.com/abatilo/gke-tpu-env-injector):
- TPU_WORKER_ID: a unique integer for each Pod, from zero to the number of Pods minus one;
- TPU_WORKER_HOSTNAMES: a comma-separated list of the TPU VM hostnames (or IP addresses) that
  communicate within the slice, one for each TPU VM, ordered and zero-indexed by TPU_WORKER_ID.
GKE injects both itself only for an Indexed Job with a subdomain; kubegan's workers are pods,
so the operator sets them the same way."""

from __future__ import annotations

import yaml
from kubegan_api import contract
from kubegan_operator.entry.cli import main
from kubegan_operator.manifests.container import DEFAULT_IMAGES, DEFAULT_TPU_IMAGE
from kubegan_trainer.worker.tpu_devices import ENV_TPU_NAME

from tests.unit.test_render import CASES, EXAMPLES, by_kind, env_of, rendered

TPU_EXAMPLE = EXAMPLES / "acgan-gke-tpu-v5e.yaml"


def tpu_pods() -> list[dict]:
    return by_kind(rendered(*CASES["tpu"]), "Pod")


def test_tpu_slice_env_is_what_gke_documents() -> None:
    pods = tpu_pods()
    hosts_per_pod = [env_of(p)[contract.ENV_TPU_WORKER_HOSTNAMES] for p in pods]
    # One list, the same in every worker of the slice.
    assert len(set(hosts_per_pod)) == 1
    hosts = hosts_per_pod[0].split(",")
    # One hostname per TPU VM: a 4x4 v5e slice is 4 hosts of 4 chips, one worker each.
    assert len(hosts) == len(pods) == 4
    ids = sorted(int(env_of(p)[contract.ENV_TPU_WORKER_ID]) for p in pods)
    assert ids == list(range(len(pods)))  # unique, 0 .. N-1
    for p in pods:
        worker_id = int(env_of(p)[contract.ENV_TPU_WORKER_ID])
        spec = p["spec"]
        # Entry TPU_WORKER_ID is this pod's own DNS name (hostname.subdomain.namespace.svc,
        # which the job's headless Service resolves): bare names, no ports or blanks.
        own = f"{spec['hostname']}.{spec['subdomain']}.{p['metadata']['namespace']}.svc"
        assert hosts[worker_id] == own
        assert all(h and ":" not in h and h.strip() == h for h in hosts)
        assert spec["containers"][0]["resources"]["limits"]["google.com/tpu"] == "4"


def test_tpu_cluster_resolver_gets_local() -> None:
    """TPU VM hosts (GKE's TPU nodes) resolve the slice locally from the two variables: no
    TPU_NAME (the old TPU Node API's remote name) reaches the workers."""
    for p in tpu_pods():
        assert ENV_TPU_NAME not in env_of(p)


def test_tpu_jobs_default_to_the_tpu_image() -> None:
    assert DEFAULT_TPU_IMAGE.rsplit(":", 1)[0].endswith("/trainer-tf-tpu")
    assert DEFAULT_IMAGES["tensorflow"] != DEFAULT_TPU_IMAGE
    for p in tpu_pods():
        assert p["spec"]["containers"][0]["image"] == DEFAULT_TPU_IMAGE
    # TensorFlow without TPUs keeps trainer-tf; PyTorch keeps trainer-torch.
    for case in ("gan3d", "digits", "pix2pix"):
        for p in by_kind(rendered(*CASES[case]), "Pod"):
            assert p["spec"]["containers"][0]["image"] in DEFAULT_IMAGES.values()


def test_kubegan_render_of_the_tpu_example_names_the_tpu_image(capsys) -> None:
    assert main(["render", str(TPU_EXAMPLE)]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    images = {d["spec"]["containers"][0]["image"] for d in docs if d["kind"] == "Pod"}
    assert images == {DEFAULT_TPU_IMAGE}


def test_a_jobs_own_image_still_wins(tmp_path, capsys) -> None:
    job = yaml.safe_load(TPU_EXAMPLE.read_text())
    job["spec"]["image"] = "registry.example/my-tpu-trainer:1"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["render", str(path)]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    images = {d["spec"]["containers"][0]["image"] for d in docs if d["kind"] == "Pod"}
    assert images == {"registry.example/my-tpu-trainer:1"}
