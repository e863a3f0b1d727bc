"""A user's script calling ``trainer.train`` as its main, for tests/trainer/test_own_loop.py:
its own absl flags (``--task``, ``--bad``) next to the trainers', a small model and a
TensorDataset. ``--bad=NAME`` passes one kind of bad input (``BAD``)."""

import sys

import torch
from absl import flags

import trainer

FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_enum("task", "classify", ["classify", "regress", "dropout", "weighted", "rows"],
                      "what to train (weighted: cross-entropy of weighted classes; rows: "
                      "classify from Hugging Face style rows, the model's own loss)")
    flags.DEFINE_string("bad", "", "pass this bad input (tests)")
    flags.DEFINE_integer("examples", 96, "training examples")
    flags.DEFINE_integer("eval_examples", 37, "evaluation examples (0: no eval_set)")


def data(task, examples, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(examples, 6, generator=generator)
    if task == "regress":
        y = x @ torch.linspace(-1, 1, 6).view(6, 1) + 0.1 * torch.randn(examples, 1,
                                                                        generator=generator)
    else:
        y = (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()  # 3 classes
    return torch.utils.data.TensorDataset(x, y)


class Rows(torch.utils.data.Dataset):
    """``data``'s classification items as Hugging Face rows: {"features": x, "labels": y}."""

    def __init__(self, pairs):
        self.pairs = pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        x, y = self.pairs[index]
        return {"features": x, "labels": y}


class RowModel(torch.nn.Module):
    """A Hugging Face style model: forward(features, labels=None) returning a dict of logits
    and, given labels, its own loss (cross-entropy ignoring -100, as theirs)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, features, labels=None):
        logits = self.net(features)
        outputs = {"logits": logits}
        if labels is not None:
            outputs["loss"] = torch.nn.functional.cross_entropy(logits, labels,
                                                                ignore_index=-100)
        return outputs


class Pairs(torch.utils.data.Dataset):
    """Items from ``item(i)`` (bad inputs)."""

    def __init__(self, size, item):
        self.size, self.item = size, item

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.item(index)


def model(task):
    torch.manual_seed(0)
    outputs = 1 if task == "regress" else 3
    layers = [torch.nn.Linear(6, 16), torch.nn.ReLU()]
    if task == "dropout":
        layers.append(torch.nn.Dropout(0.2))
    return torch.nn.Sequential(*layers, torch.nn.Linear(16, outputs))


LOSSES = {
    "regress": torch.nn.MSELoss,
    # a loss holding a tensor of its own, which must go where the model goes
    "weighted": lambda: torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 3.0])),
}

BAD = {
    # usage (64)
    "model": lambda: dict(model="not a model"),
    "loss": lambda: dict(loss_fn="mse"),
    "loss_shape": lambda: dict(loss_fn=torch.nn.CrossEntropyLoss(reduction="none")),
    "forward": lambda: dict(model=torch.nn.Linear(5, 3)),
    # data (65)
    "empty": lambda: dict(train_set=torch.utils.data.TensorDataset(torch.zeros(0, 6),
                                                                   torch.zeros(0).long())),
    "pair": lambda: dict(train_set=Pairs(96, lambda i: torch.zeros(6))),
    # item 50 is reached only in a data worker (--num_workers=1): its line comes from there
    "shape": lambda: dict(train_set=Pairs(96, lambda i: (torch.zeros(7 if i == 50 else 6),
                                                         i % 3))),
    "target": lambda: dict(train_set=Pairs(96, lambda i: (torch.zeros(6), "cat"))),
}


def main():
    define_flags()
    FLAGS(sys.argv, known_only=True)  # the script's own flags; trainer.train parses the rest
    task = FLAGS.task
    arguments = dict(model=model(task), train_set=data(task, FLAGS.examples, 1),
                     eval_set=data(task, FLAGS.eval_examples, 2) if FLAGS.eval_examples
                     else None,
                     loss_fn=LOSSES.get(task, lambda: None)())
    if task == "rows":
        arguments.update(model=RowModel(arguments["model"]),
                         train_set=Rows(arguments["train_set"]),
                         eval_set=Rows(arguments["eval_set"]) if FLAGS.eval_examples else None)
    if FLAGS.bad:
        arguments.update(BAD[FLAGS.bad]())
    summary = trainer.train(**arguments)
    print("summary", summary["global_step"], summary.get("final_eval_loss"),
          summary.get("final_accuracy"))
    for name, tensor in getattr(arguments["loss_fn"], "named_buffers", lambda: ())():
        print("loss_fn's {} on {}".format(name, tensor.device.type))


if __name__ == "__main__":
    main()
