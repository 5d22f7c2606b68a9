"""Ceph's s3-tests (third_party/s3-tests, test_s3.py) three ways, each against
a fresh moto that verifies signatures (tests/support/moto_auth.py):

  direct    s3-tests' users are IAM users of moto, and s3-tests talks to moto;
  custody   through the gateway under credential custody: each s3-tests user
            an identity of the gateway's own with `admin` on `/` (keys moto
            does not know), the gateway re-signing with its IAM key,
            `--conditional-writes on` (chained writes), and a token signed
            into every S3 request (scripts/s3-tests/fencing_token.py);
  unfenced  through `--store s3 --allow-unfenced-writes` without custody:
            s3-tests' users are moto's IAM users, as in `direct`, and the
            same signed token on every S3 request.

Run by scripts/s3-tests.sh (which says what the environment variables are),
with the Python of moto's venv. Writes into OUT: per mode the pytest log,
its JUnit XML, the answers >= 400 boto3 got (errors-MODE.jsonl), the gateway's
stderr and access log; then passed-MODE.txt, failed-MODE.txt and
summary.txt (the counts, and every test that passes directly but not
through the gateway, with the first answer the gateway run got that the
direct run did not).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
S3TESTS = os.path.join(ROOT, "third_party", "s3-tests")
PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))
MOTO_AUTH = os.path.join(ROOT, "tests", "support", "moto_auth.py")
REGION = "us-east-1"
MODES = ["direct", "custody", "unfenced"]

# moto answers every bucket's owner as this canonical user ("webfile"),
# whoever signed: s3-tests' main user is given it so that its ACL checks
# compare what moto says.
MOTO_OWNER = "75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a"

# s3-tests' users: config section, the IAM user made for it in moto, what
# it may do there (the direct and unfenced runs), and the access key id of
# its gateway identity (the custody run).
USERS = [
    ("s3 main", "s3tests-main", ["s3:*"], "FGS3TESTSMAIN0000001"),
    ("s3 alt", "s3tests-alt", ["s3:*"], "FGS3TESTSALT00000001"),
    ("s3 tenant", "s3tests-tenant", ["s3:*"], "FGS3TESTSTENANT00001"),
    ("iam", "s3tests-iam", ["s3:*", "iam:*"], "FGS3TESTSIAM00000001"),
    ("iam root", "s3tests-iam-root", ["s3:*", "iam:*"], "FGS3TESTSIAMROOT0001"),
    ("iam alt root", "s3tests-iam-alt-root", ["s3:*", "iam:*"], "FGS3TESTSIAMALTROOT1"),
]


def log(*args):
    print("s3-tests:", *args, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env():
    """The environment of every child: no proxy, no AWS settings of the
    caller's (a profile, a region, keys) to change what boto3 does."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.lower().endswith("_proxy") and not k.startswith("AWS_")
    }
    env["AWS_DEFAULT_REGION"] = REGION
    env["AWS_CONFIG_FILE"] = os.devnull
    env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


class Moto:
    """moto_auth.py serve: moto verifying signatures once its setup is done;
    its gateway user's key, and its admin user's (iam:*)."""

    def __init__(self, out, mode):
        self.stderr = open(os.path.join(out, f"moto-{mode}.log"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, MOTO_AUTH, "serve", str(free_port())],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            stdin=subprocess.DEVNULL,
            env=clean_env(),
            text=True,
            start_new_session=True,
        )
        line = self.proc.stdout.readline()
        if not line:
            self.stop()
            sys.exit(f"s3-tests: moto_auth.py serve printed nothing (see {self.stderr.name})")
        self.keys = json.loads(line)
        self.url = self.keys["url"]

    def iam(self):
        import boto3
        import botocore.config

        return boto3.client(
            "iam",
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id=self.keys["admin_access_key_id"],
            aws_secret_access_key=self.keys["admin_secret_access_key"],
            config=botocore.config.Config(retries={"max_attempts": 1}, proxies={}),
        )

    def make_users(self):
        """An IAM user of moto per s3-tests user, with its key."""
        iam = self.iam()
        keys = {}
        for section, name, actions, _ in USERS:
            iam.create_user(UserName=name)
            policy = {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
            }
            iam.put_user_policy(UserName=name, PolicyName="s3tests", PolicyDocument=json.dumps(policy))
            key = iam.create_access_key(UserName=name)["AccessKey"]
            keys[section] = (key["AccessKeyId"], key["SecretAccessKey"])
        return keys

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.stderr.close()


class Gateway:
    """The gateway binary in front of `upstream`, with `args`."""

    def __init__(self, binary, out, mode, upstream, args):
        self.dir = os.path.join(out, f"gateway-{mode}")
        os.makedirs(self.dir, exist_ok=True)
        self.stderr = open(os.path.join(out, f"gateway-{mode}.stderr"), "w")
        self.access_log = os.path.join(out, f"gateway-{mode}.access.jsonl")
        argv = [
            binary,
            "--listen", "127.0.0.1:0",
            "--admin-listen", "127.0.0.1:0",
            "--data-dir", os.path.join(self.dir, "data"),
            "--upstream", upstream,
            "--store", "s3",
            "--access-log", self.access_log,
        ] + args
        with open(os.path.join(out, f"gateway-{mode}.argv"), "w") as f:
            f.write(" ".join(argv) + "\n")
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            stdin=subprocess.DEVNULL,
            env=clean_env(),
            text=True,
            start_new_session=True,
        )
        self.addr = None
        for line in self.proc.stdout:
            if line.startswith("data plane listening on "):
                self.addr = line.split()[-1]
                break
        if self.addr is None:
            self.stop()
            sys.exit(f"s3-tests: the gateway did not start (see {self.stderr.name})")
        # Keep reading what it prints so that it never blocks.
        import threading

        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.stderr.close()


def write_identities(directory):
    """The gateway's identities: each s3-tests user, `admin` on `/`, with a
    key of the gateway's own; returns the file and {section: (id, secret)}."""
    keys = {}
    lines = []
    for section, name, _, key_id in USERS:
        secret = f"{name}-secret-{os.urandom(12).hex()}"
        secret_file = os.path.join(directory, f"{name}.secret")
        with open(secret_file, "w") as f:
            f.write(secret)
        os.chmod(secret_file, 0o600)
        keys[section] = (key_id, secret)
        lines += [
            "[[identity]]",
            f'name = "{name}"',
            f'access_key_id = "{key_id}"',
            f'secret_file = "{secret_file}"',
            'allow = [ { prefix = "/", access = "admin" } ]',
            "",
        ]
    path = os.path.join(directory, "identities.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path, keys


def write_store_credentials(directory, moto):
    """--upstream-credentials: moto's key for the gateway's IAM user."""
    secret = os.path.join(directory, "store.secret")
    with open(secret, "w") as f:
        f.write(moto.keys["secret_access_key"])
    os.chmod(secret, 0o600)
    path = os.path.join(directory, "store.toml")
    with open(path, "w") as f:
        f.write(
            'kind = "aws-sigv4"\n'
            f'access_key_id = "{moto.keys["access_key_id"]}"\n'
            f'secret_access_key_file = "{secret}"\n'
            f'region = "{REGION}"\n'
        )
    return path


def write_conf(path, endpoint, keys):
    """s3tests.conf: the endpoint, and each user's key (the rest as in
    s3tests.conf.SAMPLE)."""
    host, port = endpoint.rsplit(":", 1)
    details = {
        # The lifecycle and restore tests wait multiples of these (10 and
        # 100 s by default) for RGW's debug clock; moto has none.
        "s3 main": {"display_name": "webfile", "user_id": MOTO_OWNER, "email": "main@example.com",
                    "api_name": "", "lc_debug_interval": 1, "rgw_restore_debug_interval": 1,
                    "rgw_restore_processor_period": 1},
        "s3 alt": {"display_name": "john.doe", "email": "john.doe@example.com",
                   "user_id": "56789abcdef0123456789abcdef0123456789abcdef0123456789abcdef01234"},
        "s3 tenant": {"display_name": "testx$tenanteduser", "email": "tenanteduser@example.com",
                      "user_id": "testx$9876543210abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                      "tenant": "testx"},
        "iam": {"display_name": "youruseridhere", "email": "s3@example.com",
                "user_id": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
        "iam root": {"user_id": "RGW11111111111111111", "email": "account1@ceph.com"},
        "iam alt root": {"user_id": "RGW22222222222222222", "email": "account2@ceph.com"},
    }
    lines = [
        "[DEFAULT]",
        f"host = {host}",
        f"port = {port}",
        "is_secure = False",
        "ssl_verify = False",
        "",
        "[fixtures]",
        "bucket prefix = s3t-{random}-",
        "iam name prefix = s3-tests-",
        "iam path prefix = /s3-tests/",
        "",
    ]
    for section, _, _, _ in USERS:
        lines.append(f"[{section}]")
        key_id, secret = keys[section]
        lines.append(f"access_key = {key_id}")
        lines.append(f"secret_key = {secret}")
        for k, v in details[section].items():
            lines.append(f"{k} = {v}")
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def run_pytest(out, mode, conf, token):
    """s3-tests' test_s3.py with S3TEST_CONF=conf; returns {test: outcome}."""
    junit = os.path.join(out, f"junit-{mode}.xml")
    errors = os.path.join(out, f"errors-{mode}.jsonl")
    env = clean_env()
    env.update(
        S3TEST_CONF=conf,
        PYTHONPATH=PLUGIN_DIR,
        PYTHONPYCACHEPREFIX=os.path.join(out, f"pycache-{mode}"),
        FENCEGATE_S3TESTS_TOKEN=token,
        FENCEGATE_S3TESTS_ERRORS=errors,
    )
    argv = [
        os.environ["S3TESTS_PYTHON"], "-m", "pytest",
        "s3tests/functional/test_s3.py",
        "-p", "fencing_token",
        "-p", "no:cacheprovider",
        "-q", "-rN", "--tb=line",
        f"--junitxml={junit}",
        f"--timeout={os.environ.get('S3TESTS_TIMEOUT', '90')}",
    ]
    if os.environ.get("S3TESTS_FILTER"):
        argv += ["-k", os.environ["S3TESTS_FILTER"]]
    if os.environ.get("S3TESTS_MARKERS"):
        argv += ["-m", os.environ["S3TESTS_MARKERS"]]
    started = time.monotonic()
    log(f"{mode}: running test_s3.py (log: {out}/pytest-{mode}.log)")
    with open(os.path.join(out, f"pytest-{mode}.log"), "w") as f:
        subprocess.run(argv, cwd=S3TESTS, env=env, stdout=f, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL)
    log(f"{mode}: done in {time.monotonic() - started:.0f} s")
    return read_junit(junit)


def read_junit(path):
    """{test name: "passed" | "failed" | "skipped"} from pytest's JUnit XML
    (an error in setup or teardown is a failure)."""
    outcomes = {}
    if not os.path.exists(path):
        return outcomes
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        kinds = {child.tag for child in case}
        if "failure" in kinds or "error" in kinds:
            outcome = "failed"
        elif "skipped" in kinds:
            outcome = "skipped"
        else:
            outcome = "passed"
        # A teardown error is a second entry for the same test: failed wins.
        if outcomes.get(name) != "failed":
            outcomes[name] = outcome
    return outcomes


def junit_messages(path):
    """{test name: the first line of its failure}."""
    messages = {}
    if not os.path.exists(path):
        return messages
    for case in ET.parse(path).getroot().iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error") and case.get("name") not in messages:
                text = (child.get("message") or child.text or "").strip().splitlines()
                messages[case.get("name")] = text[0][:300] if text else ""
    return messages


def read_errors(path):
    """{test: [(op, status, code, message), ...]} from errors-MODE.jsonl."""
    found = {}
    if not os.path.exists(path):
        return found
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            found.setdefault(e["test"], []).append((e["op"], e["status"], e["code"], e["message"]))
    return found


def summarise(out, results):
    modes = list(results)
    for mode, outcomes in results.items():
        for outcome in ("passed", "failed"):
            with open(os.path.join(out, f"{outcome}-{mode}.txt"), "w") as f:
                f.writelines(f"{t}\n" for t in sorted(t for t, o in outcomes.items() if o == outcome))
    lines = ["Ceph s3-tests (third_party/s3-tests, test_s3.py) against moto verifying signatures", ""]
    lines.append("| mode | passed | failed | skipped |")
    lines.append("|---|---|---|---|")
    for mode in modes:
        counts = {o: sum(1 for v in results[mode].values() if v == o) for o in ("passed", "failed", "skipped")}
        lines.append(f"| {mode} | {counts['passed']} | {counts['failed']} | {counts['skipped']} |")
    lines.append("")
    if "direct" in results:
        direct = {t for t, o in results["direct"].items() if o == "passed"}
        direct_errors = read_errors(os.path.join(out, "errors-direct.jsonl"))
        for mode in modes:
            if mode == "direct":
                continue
            passed = {t for t, o in results[mode].items() if o == "passed"}
            lost = sorted(direct - passed)
            gained = sorted(passed - {t for t, o in results["direct"].items() if o == "passed"})
            with open(os.path.join(out, f"differences-{mode}.txt"), "w") as f:
                f.writelines(f"{t}\n" for t in lost)
            errors = read_errors(os.path.join(out, f"errors-{mode}.jsonl"))
            messages = junit_messages(os.path.join(out, f"junit-{mode}.xml"))
            lines.append(f"## Pass directly, not through the gateway ({mode}): {len(lost)}")
            lines.append("")
            for t in lost:
                seen = {(op, status, code) for op, status, code, _ in direct_errors.get(t, [])}
                new = [e for e in errors.get(t, []) if (e[0], e[1], e[2]) not in seen]
                first = f"{new[0][0]} {new[0][1]} {new[0][2]}: {new[0][3]}" if new else "(no new error answer)"
                lines.append(f"- {t}: {first} | {messages.get(t, results[mode].get(t, 'not run'))}")
            lines.append("")
            lines.append(f"## Pass through the gateway ({mode}), not directly: {len(gained)}")
            lines.append("")
            lines += [f"- {t}" for t in gained]
            lines.append("")
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def run_mode(out, binary, mode):
    """One run against a fresh moto; returns {test: outcome}."""
    moto = Moto(out, mode)
    gateway = None
    try:
        users = moto.make_users()
        conf = os.path.join(out, f"s3tests-{mode}.conf")
        if mode == "direct":
            write_conf(conf, moto.url.removeprefix("http://"), users)
            token = "off"
        elif mode == "custody":
            files = os.path.join(out, "custody-files")
            os.makedirs(files, exist_ok=True)
            identities, keys = write_identities(files)
            store = write_store_credentials(files, moto)
            gateway = Gateway(binary, out, mode, moto.url, [
                "--upstream-credentials", store,
                "--identities", identities,
                "--conditional-writes", "on",
            ])
            write_conf(conf, gateway.addr, keys)
            token = os.environ.get("S3TESTS_TOKEN", "per-test")
        else:
            gateway = Gateway(binary, out, mode, moto.url, ["--allow-unfenced-writes"])
            write_conf(conf, gateway.addr, users)
            token = os.environ.get("S3TESTS_TOKEN", "per-test")
        return run_pytest(out, mode, conf, token)
    finally:
        if gateway:
            gateway.stop()
        moto.stop()
        shutil.rmtree(os.path.join(out, f"pycache-{mode}"), ignore_errors=True)


def main():
    out = os.environ["S3TESTS_OUT"]
    binary = os.environ["FENCEGATE_BIN"]
    modes = os.environ.get("S3TESTS_MODES", "direct custody unfenced").split()
    for mode in modes:
        if mode not in MODES:
            sys.exit(f"s3-tests: unknown mode {mode!r} ({', '.join(MODES)})")
    os.makedirs(out, exist_ok=True)
    results = {}
    if os.environ.get("S3TESTS_PARALLEL") == "1":
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(len(modes)) as pool:
            futures = {mode: pool.submit(run_mode, out, binary, mode) for mode in modes}
            for mode in modes:
                results[mode] = futures[mode].result()
    else:
        for mode in modes:
            results[mode] = run_mode(out, binary, mode)
    # A mode run before into the same S3TESTS_OUT is summarised too.
    for mode in MODES:
        if mode not in results and os.path.exists(os.path.join(out, f"junit-{mode}.xml")):
            results[mode] = read_junit(os.path.join(out, f"junit-{mode}.xml"))
    summarise(out, {mode: results[mode] for mode in MODES if mode in results})


if __name__ == "__main__":
    main()
