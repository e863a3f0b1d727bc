"""jobspec.container_args sizes /dev/shm with the ImageNet trainer's own flag defaults: the
copy it keeps (jobspec loads no torch) is what ``trainer.imagenet.define_flags`` defines.
The rules themselves are tested on whole manifests in test_jobset.py."""

from absl import flags

from jobspec.container_args import _IMAGENET_DEFAULTS


def test_the_defaults_are_the_imagenet_trainers():
    from trainer import imagenet

    defined = flags.FlagValues()
    imagenet.define_flags(flag_values=defined)
    assert {name: defined[name].default for name in _IMAGENET_DEFAULTS} == _IMAGENET_DEFAULTS
