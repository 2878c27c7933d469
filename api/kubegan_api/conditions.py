"""The types of a GANTrainingJob's conditions and the reasons on them and on its events."""

from __future__ import annotations

from enum import StrEnum


class ConditionType(StrEnum):
    # Mutually exclusive, set only by transition(): which phase the job is in.
    running = "Running"
    restarting = "Restarting"
    succeeded = "Succeeded"
    failed = "Failed"
    suspended = "Suspended"
    # Independent of the phase.
    unschedulable = "Unschedulable"
    created = "Created"
    checkpoints_persistent = "CheckpointsPersistent"
    # Whether samples, metrics.jsonl, TensorBoard events and logs outlive the pods.
    artifacts_persistent = "ArtifactsPersistent"
    # False while a worker's container cannot start (image pull, missing Secret, ...).
    containers_ready = "ContainersReady"
    # True while the job is suspended because its cost reached spec.cost.budgetDollars.
    budget_exceeded = "BudgetExceeded"
    # False while the price table has no price for a machine type or accelerator the job uses.
    cost_known = "CostKnown"
    # Elastic jobs: True while the gang runs at another size than its target (Shrunk), or
    # after it grew back (Grown); the message has the sizes and why.
    resized = "Resized"


class Reason(StrEnum):
    """Condition and event reasons (CamelCase, as Kubernetes writes them)."""

    suspended = "Suspended"
    resumed = "Resumed"
    deadline_exceeded = "DeadlineExceeded"
    no_claim = "NoClaim"
    claim_mounted = "ClaimMounted"
    bucket_configured = "BucketConfigured"
    ephemeral_storage = "EphemeralStorage"
    no_fit = "NoFit"
    waiting_for_capacity = "WaitingForCapacity"
    scale_up_requested = "ScaleUpRequested"
    capacity_arrived = "CapacityArrived"
    capacity_timeout = "CapacityTimeout"
    unschedulable = "Unschedulable"
    planned = "Planned"
    workers_created = "WorkersCreated"
    finished = "Finished"
    succeeded = "Succeeded"
    running = "Running"
    all_workers_running = "AllWorkersRunning"
    scheduled = "Scheduled"
    scheduler_waiting = "SchedulerWaiting"
    replanning = "Replanning"
    restarting = "Restarting"
    preempted = "Preempted"
    worker_failed = "WorkerFailed"
    max_preemptions_exceeded = "MaxPreemptionsExceeded"
    backoff_limit_exceeded = "BackoffLimitExceeded"
    invalid_spec = "InvalidSpec"
    queued_by_kueue = "QueuedByKueue"
    checkpoint_not_committed = "CheckpointNotCommitted"
    # A restarted gang reported the checkpoint it restored from: the ended gang's lost work.
    lost_work_settled = "LostWorkSettled"
    budget_exceeded = "BudgetExceeded"
    within_budget = "WithinBudget"
    no_price = "NoPrice"
    priced = "Priced"
    trainer_config_error = "TrainerConfigError"
    shrunk = "Shrunk"
    grown = "Grown"
    growing = "Growing"  # an elastic gang checkpoints and stops to restart larger
    containers_started = "ContainersStarted"
    # The kubelet's own reasons, passed through when a container cannot start.
    err_image_pull = "ErrImagePull"
    image_pull_back_off = "ImagePullBackOff"
    err_image_never_pull = "ErrImageNeverPull"
    invalid_image_name = "InvalidImageName"
    create_container_config_error = "CreateContainerConfigError"
    create_container_error = "CreateContainerError"
    crash_loop_back_off = "CrashLoopBackOff"
    run_container_error = "RunContainerError"
