import json


class Request:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def decode_request(data, fds):
    # A worker's SpawnRequest as the agent sends it to the --preload template (workers/
    # fork_request.hpp): a JSON object, with the descriptors that came with it in their order (the
    # standard streams passed, the cgroup's directory, the diagnosis channel, the exec report's
    # write end). A text of the request (argv, environment, working directory) is a string, or the
    # list of its bytes where they are not UTF-8. ValueError for a request that is not one.
    fields = json.loads(data)
    fds = list(fds)

    def raw(text):
        return text.encode() if isinstance(text, str) else bytes(text)

    def take():
        if not fds:
            raise ValueError("fewer descriptors than the request names")
        return fds.pop(0)

    streams = [take() if kind == "fd" else kind for kind in fields["streams"]]
    if len(streams) != 3 or any(s not in ("null", "closed") for s in streams if isinstance(s, str)):
        raise ValueError("streams: {!r}".format(fields["streams"]))
    cgroup = take() if fields["cgroup"] else None
    diagnosis = take() if fields["diagnosis"] else None
    report = take()
    if fds:
        raise ValueError(f"{len(fds)} descriptors more than the request names")
    if fields["group"] not in ("session", "group", None):
        raise ValueError("group: {!r}".format(fields["group"]))
    return Request(
        argv=[raw(a) for a in fields["argv"]],
        env=[raw(e) for e in fields["env"]],
        cwd=None if fields["cwd"] is None else raw(fields["cwd"]),
        group=fields["group"],
        death_signal=int(fields["death_signal"]),
        descriptor_limit=fields["descriptor_limit"],
        streams=streams,
        cgroup=cgroup,
        diagnosis=diagnosis,
        report=report,
        cpus=[int(c) for c in fields["cpus"]],
    )
