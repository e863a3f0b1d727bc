"""launcher.job_env: parsing TPU_CONFIG, TF_CONFIG, CLUSTER_SPEC and overrides, plus fuzzing."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SEED_TF_CONFIG, SEED_TPU_CONFIG, examples
from launcher.errors import EX_CONFIG, ConfigError
from launcher.job_env import ClusterConfig, JobEnvironment, TpuConfig


def test_empty_environment_has_nothing():
    job_env = JobEnvironment.from_environ({})
    assert job_env == JobEnvironment()


def test_seed_variables_parse():
    job_env = JobEnvironment.from_environ({"TPU_CONFIG": SEED_TPU_CONFIG,
                                           "TF_CONFIG": SEED_TF_CONFIG})
    assert job_env.tpu_config == TpuConfig("j79edad251b5e3ba2-ml", "us-central1-b",
                                           "cmle-training-14556593641811293930-tpu")
    tf_config = job_env.tf_config
    assert (tf_config.task_type, tf_config.task_index) == ("master", 0)
    assert (tf_config.accelerator_type, tf_config.accelerator_count) == ("TPU_V3", 8)
    assert tf_config.tpu_tf_version == "1.15"
    assert tf_config.worker_type == "cloud_tpu"
    assert tf_config.cluster == (("master", ("127.0.0.1:2222",)),)


def test_tf_config_job_as_object_with_camel_case_keys():
    text = json.dumps({"job": {"workerType": "cloud_tpu", "workerConfig": {
        "acceleratorConfig": {"type": "TPU_V2", "count": 8}, "tpuTfVersion": "2.11"}}})
    config = ClusterConfig.parse("TF_CONFIG", text)
    assert (config.accelerator_type, config.accelerator_count, config.tpu_tf_version) == (
        "TPU_V2", 8, "2.11")


def test_vertex_cluster_spec_with_tpu_pool():
    text = json.dumps({"cluster": {"workerpool0": ["cmle-host:2222"]}, "environment": "cloud",
                       "task": {"type": "workerpool0", "index": 0, "trial": ""},
                       "job": {"workerPoolSpecs": [{"machineSpec": {
                           "machineType": "cloud-tpu", "acceleratorType": "TPU_V3",
                           "acceleratorCount": 8}, "replicaCount": "1"}]}})
    config = JobEnvironment.from_environ({"CLUSTER_SPEC": text}).cluster_spec
    assert config.accelerator_types == ("TPU_V3",) and config.requests_tpu


def test_cpu_cluster_spec_does_not_request_tpu():
    text = json.dumps({"job": {"workerPoolSpecs": [{"machineSpec": {
        "machineType": "n1-standard-4"}}]}})
    assert not ClusterConfig.parse("CLUSTER_SPEC", text).requests_tpu


def test_overrides_are_read_and_pjrt_device_normalised():
    job_env = JobEnvironment.from_environ({"PJRT_DEVICE": " cpu ", "TPU_NAME": "my-tpu",
                                           "TPU_WORKER_ID": "0", "XRT_TPU_CONFIG": ""})
    assert job_env.runtime_settings == (("PJRT_DEVICE", "CPU"),)
    assert job_env.tpu_name == "my-tpu"
    assert job_env.tpu_vm_hints == (("TPU_WORKER_ID", "0"),)


@pytest.mark.parametrize("environ, names", [
    ({"TPU_CONFIG": "{"}, "TPU_CONFIG is not valid JSON"),
    ({"TPU_CONFIG": "[]"}, "TPU_CONFIG must be a JSON object"),
    ({"TPU_CONFIG": '{"project": "p", "zone": "z"}'}, "TPU_CONFIG.tpu_node_name"),
    ({"TPU_CONFIG": '{"project": "p", "zone": " ", "tpu_node_name": "n"}'}, "TPU_CONFIG.zone"),
    ({"TF_CONFIG": '{"job": "{not json"}'}, "TF_CONFIG.job is a string but not valid JSON"),
    ({"TF_CONFIG": '{"job": {"worker_config": {"accelerator_config": {"count": "eight"}}}}'},
     "TF_CONFIG.job.worker_config.accelerator_config.count"),
    ({"TF_CONFIG": '{"task": {"index": -1}}'}, "TF_CONFIG.task.index"),
    ({"TF_CONFIG": '{"cluster": {"master": "host:1"}}'}, "TF_CONFIG.cluster.master"),
    ({"CLUSTER_SPEC": '{"job": {"workerPoolSpecs": [3]}}'}, "CLUSTER_SPEC.job.workerPoolSpecs[0]"),
    ({"PJRT_DEVICE": "TPUU"}, "PJRT_DEVICE"),
])
def test_bad_values_name_the_variable_and_field(environ, names):
    with pytest.raises(ConfigError) as caught:
        JobEnvironment.from_environ(environ)
    assert names in caught.value.message
    assert caught.value.exit_code == EX_CONFIG
    assert "\n" not in caught.value.message and caught.value.hint


# --- fuzzing: every value either parses or is one clean ConfigError naming its variable ---

_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 10), st.floats(allow_nan=False),
                       st.text(max_size=8), st.sampled_from(["", " ", "8", "TPU_V3", "x\ny"]))
_json = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["project", "zone", "tpu_node_name", "job", "task",
                                     "cluster", "index", "type", "count", "worker_config",
                                     "workerConfig", "accelerator_config", "acceleratorConfig",
                                     "tpu_tf_version", "workerPoolSpecs", "machineSpec",
                                     "machineType", "acceleratorType", "master"]),
                    inner, max_size=4)), max_leaves=12)
_text = st.one_of(st.text(max_size=40), _json.map(json.dumps),
                  _json.map(lambda v: json.dumps({"job": json.dumps(v)})))


def _check(variable, value):
    try:
        JobEnvironment.from_environ({variable: value})
    except ConfigError as error:
        assert variable in error.message, error.message
        assert "\n" not in error.message and "\n" not in error.hint and error.hint
        assert error.exit_code == EX_CONFIG


@settings(max_examples=examples(400), deadline=None)
@given(_text)
def test_fuzz_tpu_config(value):
    _check("TPU_CONFIG", value)


@settings(max_examples=examples(400), deadline=None)
@given(_text)
def test_fuzz_tf_config(value):
    _check("TF_CONFIG", value)


@settings(max_examples=examples(400), deadline=None)
@given(_text)
def test_fuzz_cluster_spec(value):
    _check("CLUSTER_SPEC", value)


@settings(max_examples=examples(100), deadline=None)
@given(st.from_regex(r"[a-z][-a-z0-9]{5,28}[a-z0-9]", fullmatch=True),
       st.from_regex(r"[a-z]{2,12}-[a-z]{2,10}[0-9]-[a-f]", fullmatch=True),
       st.from_regex(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True))
def test_fuzz_valid_tpu_config_always_parses(project, zone, name):
    text = json.dumps({"project": project, "zone": zone, "tpu_node_name": name})
    config = JobEnvironment.from_environ({"TPU_CONFIG": text}).tpu_config
    assert config == TpuConfig(project, zone, name)


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from(["project", "zone", "tpu_node_name"]), st.text(min_size=1, max_size=70))
def test_fuzz_any_name_parses_or_names_the_field(field, value):
    fields = {"project": "my-project", "zone": "us-central1-b", "tpu_node_name": "my-tpu",
              field: value}
    try:
        JobEnvironment.from_environ({"TPU_CONFIG": json.dumps(fields)})
    except ConfigError as error:
        assert "TPU_CONFIG." + field in error.message and error.hint


@pytest.mark.parametrize("environ, message", [
    ({"TPU_NAME": "a/b"}, "TPU_NAME='a/b' is not a valid TPU node name"),
    ({"TPU_NAME": "My_TPU"}, "TPU_NAME='My_TPU' is not a valid TPU node name"),
    ({"TPU_NAME": "x" * 64}, "is not a valid TPU node name"),
    ({"TPU_NAME": "grpc://10.0.0.2:8470"}, "TPU_NAME='grpc://10.0.0.2:8470' is not a valid"),
    ({"TPU_CONFIG": '{"project": "p q", "zone": "us-central1-b", "tpu_node_name": "n"}'},
     "TPU_CONFIG.project='p q' is not a valid project"),
    ({"TPU_CONFIG": '{"project": "p", "zone": "us-central1-b?", "tpu_node_name": "n"}'},
     "TPU_CONFIG.zone='us-central1-b?' is not a valid zone"),
    ({"TPU_CONFIG": '{"project": "p", "zone": "us-central1-b", "tpu_node_name": "n/../m"}'},
     "TPU_CONFIG.tpu_node_name='n/../m' is not a valid TPU node name"),
])
def test_names_that_cannot_exist_are_config_errors(environ, message):
    with pytest.raises(ConfigError) as caught:
        JobEnvironment.from_environ(environ)
    assert message in caught.value.message and caught.value.exit_code == EX_CONFIG


@pytest.mark.parametrize("variable", ["TPU_CONFIG", "TF_CONFIG", "CLUSTER_SPEC"])
def test_json_nested_beyond_the_parser_is_a_config_error(variable):
    with pytest.raises(ConfigError) as caught:
        JobEnvironment.from_environ({variable: "[" * 100000 + "]" * 100000})
    assert caught.value.exit_code == EX_CONFIG
    assert caught.value.message == "{} is nested too deeply to be a job description".format(
        variable)
