"""Commands run as if on a named host of a cluster: inside a network namespace, with their own
host name (a UTS namespace) and an /etc/hosts that names the other hosts (a private mount
namespace, so the machine's own file is untouched). For the Slurm and Kubernetes tests."""
import os
import shutil


def which(name):
    """`name` on PATH, or in sbin where PATH lacks it; None where it is not installed."""
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(p, os.X_OK)), None)


def write_hosts(path, names):
    """An /etc/hosts for `names` ({host name: address})."""
    path.write_text("127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, a in names.items()))


def on_host(netns, hostname, hosts_file, command):
    """`command` in network namespace `netns` as host `hostname` seeing `hosts_file`. Only the
    network namespace is entered (nsenter), not `ip netns exec`'s fresh /sys: slurmd needs the
    machine's cgroup file system."""
    script = f'hostname {hostname} && mount --bind {hosts_file} /etc/hosts && exec "$@"'
    return [which("nsenter"), f"--net=/run/netns/{netns}", which("unshare"), "--uts", "--mount",
            "--propagation", "private", "sh", "-c", script, "sh", *command]
