"""The --preload template's side of a worker's request (trainrun_request.decode_request).

data/fork_request.json is what the agent's encoder writes for fork_request_test.cpp's first case.
"""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.environ["TRAINRUN_WORKER_PYTHON"])
from trainrun_request import decode_request  # noqa: E402

SHARED = (Path(__file__).parent / "data" / "fork_request.json").read_bytes()


def test_the_agents_request_decodes_field_by_field():
    r = decode_request(SHARED, [17, 18, 20, 21, 30])
    assert r.argv == [b"/usr/bin/python3", b"-u", b"train.py", b"--lr=0.1", b"\xff\x80 x"]
    assert r.env == [b"RANK=1", b"PATH=/usr/bin", b"NAME=\xe9"]
    assert r.cwd == b"/job"
    assert r.group == "session"
    assert r.death_signal == 9
    assert r.descriptor_limit == 4096
    assert r.streams == ["null", 17, 18]
    assert (r.cgroup, r.diagnosis, r.report) == (20, 21, 30)
    assert r.cpus == [2, 3]


def request(**changes):
    fields = json.loads(SHARED)
    fields.update(changes)
    return json.dumps(fields).encode()


def test_without_a_cgroup_a_channel_or_a_working_directory():
    r = decode_request(request(cgroup=False, diagnosis=False, cwd=None, group=None,
                               descriptor_limit=None, streams=["closed", "fd", "null"]), [5, 6])
    assert (r.cgroup, r.diagnosis, r.cwd, r.group, r.descriptor_limit) == (None,) * 5
    assert r.streams == ["closed", 5, "null"]
    assert r.report == 6


@pytest.mark.parametrize("fds", [[17, 18, 20, 21], [17, 18, 20, 21, 30, 31]])
def test_descriptors_other_than_the_request_names_are_refused(fds):
    with pytest.raises(ValueError, match="descriptors"):
        decode_request(SHARED, fds)


@pytest.mark.parametrize("changes", [{"streams": ["fd", "pipe", "fd"]}, {"streams": ["fd"]},
                                     {"group": "other"}])
def test_a_field_out_of_its_values_is_refused(changes):
    with pytest.raises(ValueError):
        decode_request(request(**changes), [17, 18, 20, 21, 30])


def test_text_that_is_not_json_is_refused():
    with pytest.raises(ValueError):
        decode_request(b"\x04\x00\x00\x00", [1])
