"""trainer.data.tar_members: shards written and streamed with the standard library."""

import io

from hypothesis import given
from hypothesis import strategies as st

from trainer.data.tar_members import read_samples, tar_bytes


class OneWay(io.RawIOBase):
    """A stream that cannot seek, as a network download is."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        chunk = self.data[self.at:self.at + min(len(buffer), 1000)]
        buffer[:len(chunk)] = chunk
        self.at += len(chunk)
        return len(chunk)


keys = st.from_regex(r"[a-z0-9_]{1,20}", fullmatch=True)


@given(st.lists(st.tuples(keys, st.binary(max_size=3000), st.integers(0, 999)),
                unique_by=lambda item: item[0], max_size=12))
def test_examples_come_back_in_order_through_a_stream_that_cannot_seek(examples):
    members = []
    for key, image, label in examples:
        members += [(key + ".jpg", image), (key + ".cls", str(label).encode())]
    data = tar_bytes(members)
    assert data == tar_bytes(members)  # the same members, the same bytes
    read = list(read_samples(io.BufferedReader(OneWay(data))))
    assert read == [(key, {"jpg": image, "cls": str(label).encode()})
                    for key, image, label in examples]


def test_extension_is_what_follows_the_first_dot_of_the_base_name():
    data = tar_bytes([("dir/a.seg.png", b"1"), ("dir/a.CLS", b"2"), ("b.jpg", b"3")])
    assert list(read_samples(io.BytesIO(data))) == [("a", {"seg.png": b"1", "cls": b"2"}),
                                                    ("b", {"jpg": b"3"})]
