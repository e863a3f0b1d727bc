"""What a pod of a multi-host TPU slice on GKE finds in its environment: the variables GKE's TPU
device plugin injects into a container that requests ``google.com/tpu`` (their names and forms
as the plugin sets them: ``TPU_SKIP_MDS_QUERY``, the accelerator type, the topology, the host
and per-host chip bounds under both names, wrap and twist, the runtime metrics ports, the vbar
control service) and the two GKE's webhook adds to an indexed Job's pods (``TPU_WORKER_ID``,
``TPU_WORKER_HOSTNAMES``: the JobSet's pods by their headless-service names). For tests of the
launcher and of the rehearsal in the pjrt image."""

from typing import Dict


def slice_host(accelerator_type: str, jobset: str, worker: int) -> Dict[str, str]:
    """Host ``worker`` of a 16-chip slice (topology 4x4: 4 hosts of 2x2 chips) of JobSet
    ``jobset`` whose replicated job is ``slice``."""
    hostnames = ",".join("{0}-slice-0-{1}.{0}".format(jobset, index) for index in range(4))
    return {
        "TPU_SKIP_MDS_QUERY": "true",
        "TPU_ACCELERATOR_TYPE": accelerator_type,
        "TPU_TOPOLOGY": "4x4",
        "TPU_HOST_BOUNDS": "2,2,1", "HOST_BOUNDS": "2,2,1",
        "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1", "CHIPS_PER_HOST_BOUNDS": "2,2,1",
        "TPU_TOPOLOGY_WRAP": "false,false,false", "WRAP": "false,false,false",
        "TPU_TOPOLOGY_ALT": "false", "ALT": "false",
        "TPU_RUNTIME_METRICS_PORTS": "8431,8432,8433,8434",
        "VBAR_CONTROL_SERVICE_URL": "unix:///var/run/tpu-plugin/vbar.sock",
        "TPU_WORKER_ID": str(worker),
        "TPU_WORKER_HOSTNAMES": hostnames,
    }


V5E_16_HOST_2 = slice_host("v5litepod-16", "imagenet-v5e-16", 2)
V6E_16_HOST_2 = slice_host("v6e-16", "imagenet-v6e-16", 2)
