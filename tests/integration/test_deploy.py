"""The deployment files, checked offline: deploy/Dockerfile, deploy/echod.service, and every
kustomize overlay under k8s/ rendered with `kubectl kustomize` (those tests are skipped with a
message when kubectl is not installed; kubectl is not a Debian package).

Run on its own: ECHOD_BIN=build/daemon/echod /usr/bin/python3 tests/integration/test_deploy.py
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import yaml  # noqa: E402

from echod_harness import ECHOD_BIN, ROOT, SANITIZER, main  # noqa: E402

DOCKERFILE = os.path.join(ROOT, "deploy", "Dockerfile")
UNIT = os.path.join(ROOT, "deploy", "echod.service")
ARMS_DIR = os.path.join(ROOT, "config", "arms")
K8S = os.path.join(ROOT, "k8s")
K6_DIR = os.path.join(ROOT, "deploy", "k6")
KUBECTL = shutil.which("kubectl")
GRPC_PORT = 50051


def arms():
    return sorted(f[:-5] for f in os.listdir(ARMS_DIR) if f.endswith(".yaml"))


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def duration_s(text):
    """echod durations: 250ms, 10s, 2m, a bare number is milliseconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", str(text))
    if not m:
        raise ValueError("bad duration %r" % text)
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 0.001}[m.group(2)]


def port_of(hostport):
    return int(str(hostport).rsplit(":", 1)[1])


# ---------------------------------------------------------------------------------------------
# Dockerfile


class Stage:
    def __init__(self, image, name):
        self.image = image
        self.name = name
        self.instructions = []  # (KEYWORD, argument text)


def parse_dockerfile(text):
    """Stages with their instructions; continuation lines joined, comments dropped."""
    lines = []
    cur = ""
    for raw in text.splitlines():
        s = raw.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.startswith("#"):  # a comment inside a continued instruction
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        lines.append(cur)
        cur = ""
    stages = []
    for line in lines:
        kw, _, arg = line.partition(" ")
        kw = kw.upper()
        if kw == "FROM":
            parts = arg.split()
            parts = [p for p in parts if not p.startswith("--")]
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        elif stages:
            stages[-1].instructions.append((kw, arg.strip()))
    return stages


def apt_installs(stage):
    """Package names given to `apt-get install` in the stage's RUN instructions."""
    pkgs = []
    for kw, arg in stage.instructions:
        if kw != "RUN":
            continue
        for cmd in re.split(r"&&|;|\|\|", arg):
            words = shlex.split(cmd)
            if "apt-get" in words and "install" in words:
                for w in words[words.index("install") + 1:]:
                    if not w.startswith("-"):
                        pkgs.append(w.split("=")[0])
    return pkgs


def ldd_packages(binary):
    """{library path: Debian package} for every shared library ldd lists for binary."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)\s+\(", line)
        if m:
            libs.append(m.group(1))
    result = {}
    for lib in libs:
        pkg = None
        for path in (os.path.realpath(lib), lib):
            p = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
            if p.returncode == 0:
                pkg = p.stdout.split(":", 1)[0].strip()
                break
        result[lib] = pkg
    return result


class Dockerfile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stages = parse_dockerfile(read(DOCKERFILE))
        cls.build = cls.stages[0]
        cls.runtime = cls.stages[-1]

    def test_stages_and_base_images(self):
        self.assertGreaterEqual(len(self.stages), 2, "multi-stage: a build and a runtime stage")
        self.assertRegex(self.build.image, r"^debian:(bookworm|12)(\b|$)",
                         "the build stage is Debian 12")
        self.assertEqual(self.runtime.image, "debian:bookworm-slim")
        copies = [a for k, a in self.runtime.instructions if k == "COPY"]
        self.assertTrue(any(a.startswith("--from=%s " % self.build.name) and "echod" in a
                            for a in copies), "the runtime stage copies echod from the build stage")
        self.assertTrue(any(a.split()[-1] == "/etc/echod/echod.yaml" for a in copies),
                        "a default config at /etc/echod/echod.yaml")

    def test_build_stage_runs_meson_release(self):
        runs = " ".join(a for k, a in self.build.instructions if k == "RUN")
        self.assertRegex(runs, r"meson setup \S+.*--buildtype=release")
        self.assertRegex(runs, r"ninja -C")

    def test_build_stage_installs_bootstrap_build_packages(self):
        m = re.search(r"^BUILD_PKGS=\(([^)]*)\)", read(os.path.join(ROOT, "deploy", "bootstrap.sh")),
                      re.M)
        self.assertTrue(m, "BUILD_PKGS in deploy/bootstrap.sh")
        wanted = set(m.group(1).split())
        missing = wanted - set(apt_installs(self.build))
        self.assertFalse(missing, "the build stage lacks packages deploy/bootstrap.sh builds with: %s"
                         % sorted(missing))

    def test_runtime_installs_every_linked_library(self):
        if not shutil.which("dpkg") or not shutil.which("ldd"):
            self.skipTest("dpkg or ldd not available")
        if SANITIZER:
            self.skipTest("a %s build links its sanitizer runtime; the image is a release build" % SANITIZER)
        installed = set(apt_installs(self.runtime))
        libs = ldd_packages(ECHOD_BIN)
        self.assertTrue(libs, "ldd listed no library for %s" % ECHOD_BIN)
        unknown = [lib for lib, pkg in libs.items() if pkg is None]
        self.assertFalse(unknown, "no Debian package owns %s (dpkg -S)" % unknown)
        missing = sorted({pkg for pkg in libs.values()} - installed)
        self.assertFalse(missing, "the runtime stage does not install %s, which %s links (%s)" % (
            missing, ECHOD_BIN, {lib: pkg for lib, pkg in libs.items() if pkg in missing}))
        dev = [p for p in installed if p.endswith("-dev") or p in ("gcc", "meson", "ninja-build")]
        self.assertFalse(dev, "build tools in the runtime stage: %s" % dev)

    def test_user_ports_entrypoint(self):
        last = {}
        exposed = set()
        for k, a in self.runtime.instructions:
            last[k] = a
            if k == "EXPOSE":
                exposed |= {int(p.split("/")[0]) for p in a.split()}
        self.assertIn("USER", last, "the runtime stage sets USER")
        user = last["USER"].split(":")[0]
        self.assertNotIn(user, ("root", "0"), "USER is not root")
        self.assertTrue({50051, 8080} <= exposed, "EXPOSE 50051 8080, got %s" % sorted(exposed))
        self.assertIn("ENTRYPOINT", last)
        ep = yaml.safe_load(last["ENTRYPOINT"])
        self.assertIsInstance(ep, list, "ENTRYPOINT in exec form")
        self.assertEqual(os.path.basename(ep[0]), "echod")
        self.assertEqual(ep[1:], ["--config", "/etc/echod/echod.yaml"])

    def test_builds_offline_and_checks_as_the_image_user(self):
        # A "# syntax=" parser directive makes BuildKit pull a frontend image from a registry.
        self.assertNotRegex(read(DOCKERFILE), r"(?im)^#\s*syntax\s*=",
                            "no # syntax= directive: the Dockerfile builds offline")
        user = None
        checked = False
        for k, a in self.runtime.instructions:
            if k == "USER":
                user = a
            if k == "RUN" and "--check-config" in a:
                checked = True
                self.assertTrue(user and user.split(":")[0] not in ("root", "0"),
                                "the build's --check-config runs as the image's user, after USER")
        self.assertTrue(checked, "the runtime stage runs echod --check-config")

    def test_dockerignore_keeps_build_dirs_out(self):
        ignore = read(DOCKERFILE + ".dockerignore").split()
        for pat in ("build*/", "**/node_modules/", ".git"):
            self.assertIn(pat, ignore)


# ---------------------------------------------------------------------------------------------
# systemd unit


def parse_unit(text):
    """{section: [(key, value)]}, repeated keys kept in order."""
    out = {}
    section = None
    for line in text.splitlines():
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1]
            out.setdefault(section, [])
            continue
        k, _, v = s.partition("=")
        out[section].append((k.strip(), v.strip()))
    return out


class SystemdUnit(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.text = read(UNIT)
        cls.unit = parse_unit(cls.text)
        cls.service = dict(cls.unit["Service"])

    def test_runs_echod_with_its_config(self):
        words = self.service["ExecStart"].split()
        self.assertEqual(os.path.basename(words[0]), "echod")
        self.assertEqual(words[1:3], ["--config", "/etc/echod/echod.yaml"])
        self.assertIn("WantedBy", dict(self.unit["Install"]))

    def test_hardening(self):
        s = self.service
        self.assertTrue(s.get("DynamicUser") == "yes" or s.get("User") not in (None, "root", "0"),
                        "runs as DynamicUser or a non-root User")
        for key, want in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                          ("ProtectHome", "yes"), ("PrivateTmp", "yes"), ("PrivateDevices", "yes"),
                          ("ProtectKernelTunables", "yes"), ("ProtectKernelModules", "yes"),
                          ("ProtectControlGroups", "yes"), ("RestrictNamespaces", "yes"),
                          ("LockPersonality", "yes"), ("MemoryDenyWriteExecute", "yes")):
            self.assertEqual(s.get(key), want, "%s=%s" % (key, want))
        self.assertEqual(s.get("CapabilityBoundingSet"), "", "no capabilities (ports > 1024)")
        self.assertIn("AF_INET", s.get("RestrictAddressFamilies", ""))
        self.assertTrue(any(k == "SystemCallFilter" for k, _ in self.unit["Service"]))

    def test_stop_timeout_covers_the_drain(self):
        default = yaml.safe_load(read(os.path.join(ROOT, "config", "echod.yaml")))
        drain = duration_s(default["shutdown"]["drain_timeout"])
        stop = self.service.get("TimeoutStopSec", "90")
        self.assertGreater(float(stop.rstrip("s")), drain, "TimeoutStopSec > drain_timeout")
        self.assertEqual(self.service.get("KillSignal", "SIGTERM"), "SIGTERM")

    def test_systemd_analyze(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("systemd-analyze not installed; the static checks above stand in")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "echod.service")
            with open(path, "w") as f:  # the binary where this test has it
                f.write(self.text.replace("/usr/local/bin/echod", os.path.abspath(ECHOD_BIN)))
            p = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, "systemd-analyze verify: %s%s" % (p.stdout, p.stderr))
            p = subprocess.run(["systemd-analyze", "security", "--offline=true", path],
                               capture_output=True, text=True)
            if p.returncode == 0:
                m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", p.stdout)
                self.assertTrue(m, p.stdout[-2000:])
                self.assertLessEqual(float(m.group(1)), 3.0,
                                     "systemd-analyze security exposure:\n" + p.stdout[-3000:])


# ---------------------------------------------------------------------------------------------
# Kubernetes


def kustomize(path):
    p = subprocess.run([KUBECTL, "kustomize", path], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError("kubectl kustomize %s failed:\n%s" % (path, p.stderr))
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    if len(found) != 1:
        raise AssertionError("want one %s, got %d" % (kind, len(found)))
    return found[0]


def set_args(args):
    """['--set', 'k=v', '--set=k2=v2'] -> ['k=v', 'k2=v2']; other arguments are an error."""
    out = []
    it = iter(args or [])
    for a in it:
        if a in ("--set", "-s"):
            out.append(next(it))
        elif a.startswith("--set="):
            out.append(a[len("--set="):])
        else:
            raise AssertionError("unexpected container argument %r" % a)
    return out


def probe_seconds(handler):
    """How long a preStop handler waits: sleep N or `sleep: {seconds: N}`."""
    if not handler:
        return 0
    if "sleep" in handler:
        return float(handler["sleep"]["seconds"])
    cmd = handler.get("exec", {}).get("command", [])
    if cmd and os.path.basename(cmd[0]) == "sleep":
        return float(cmd[1])
    return 0


@unittest.skipUnless(KUBECTL, "kubectl not installed (it is not a Debian package): the k8s "
                              "overlays are not rendered here")
class Kustomize(unittest.TestCase):
    def test_generated_files_are_in_sync(self):
        p = subprocess.run([sys.executable, os.path.join(K8S, "sync-arms"), "--check"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, "k8s/ is out of date with config/ or deploy/k6/:\n"
                         + p.stdout + p.stderr)
        if p.stdout.strip():
            print(p.stdout.strip())

    def test_one_overlay_per_arm_file(self):
        overlays = sorted(d for d in os.listdir(os.path.join(K8S, "arms"))
                          if os.path.isfile(os.path.join(K8S, "arms", d, "kustomization.yaml")))
        self.assertEqual(overlays, arms(), "k8s/arms/* vs config/arms/*.yaml (run k8s/sync-arms)")

    def test_base_renders(self):
        docs = kustomize(os.path.join(K8S, "base"))
        self.check_server(docs, None, read(os.path.join(ROOT, "config", "echod.yaml")))

    def test_every_arm_overlay(self):
        for arm in arms():
            with self.subTest(arm=arm):
                docs = kustomize(os.path.join(K8S, "arms", arm))
                self.check_server(docs, arm, read(os.path.join(ARMS_DIR, arm + ".yaml")))

    # -- one rendered server: Deployment + Service + ConfigMap

    def check_server(self, docs, arm, config_text):
        dep, svc, cm = one(docs, "Deployment"), one(docs, "Service"), one(docs, "ConfigMap")
        self.assertEqual(len(docs), 3, [d["kind"] for d in docs])
        suffix = "-" + arm if arm else ""
        self.assertEqual(dep["metadata"]["name"], "echod" + suffix)
        self.assertEqual(svc["metadata"]["name"], "echod" + suffix)
        self.assertTrue(cm["metadata"]["name"].startswith("echod-config" + suffix + "-"))

        # labels: arm=<overlay> everywhere, and the arm file names the same arm
        config = yaml.safe_load(config_text)
        if arm:
            self.assertEqual(config.get("arm"), arm, "config/arms/%s.yaml says arm: %r" % (
                arm, config.get("arm")))
            tpl_labels = dep["spec"]["template"]["metadata"]["labels"]
            for where, labels in (("Deployment", dep["metadata"]["labels"]),
                                  ("selector", dep["spec"]["selector"]["matchLabels"]),
                                  ("pod template", tpl_labels),
                                  ("Service", svc["metadata"]["labels"]),
                                  ("Service selector", svc["spec"]["selector"]),
                                  ("ConfigMap", cm["metadata"]["labels"])):
                self.assertEqual(labels.get("arm"), arm, "%s label arm" % where)
            sel = svc["spec"]["selector"]
            self.assertTrue(all(tpl_labels.get(k) == v for k, v in sel.items()),
                            "the Service selects the pods")

        pod = dep["spec"]["template"]["spec"]
        containers = pod["containers"] + pod.get("initContainers", [])
        # Guaranteed QoS: every container has requests == limits for cpu and memory
        for c in containers:
            res = c.get("resources", {})
            req, lim = res.get("requests", {}), res.get("limits", {})
            for r in ("cpu", "memory"):
                self.assertIn(r, lim, "%s: no %s limit" % (c["name"], r))
                self.assertEqual(str(req.get(r, lim[r])), str(lim[r]),
                                 "%s: %s request != limit" % (c["name"], r))
        echod = next(c for c in pod["containers"] if c["name"] == "echod")
        self.assertEqual(str(echod["resources"]["limits"]["cpu"]), "1")
        self.assertEqual(str(echod["resources"]["limits"]["memory"]), "1Gi")

        # the mounted config is this arm's file, and it passes --check-config with the args
        mount = next(m for m in echod["volumeMounts"] if m["mountPath"] == "/etc/echod/echod.yaml")
        vol = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        self.assertEqual(vol["configMap"]["name"], cm["metadata"]["name"])
        key = mount.get("subPath", "echod.yaml")
        # the arm's file as it is; comments may lag behind (k8s/sync-arms refreshes them)
        self.assertEqual(yaml.safe_load(cm["data"][key]), config,
                         "the ConfigMap's config differs from the arm's file: run k8s/sync-arms")
        if cm["data"][key] != config_text:
            print("note: %s: the ConfigMap's comments differ from the arm's file (k8s/sync-arms "
                  "refreshes them)" % (arm or "base"))
        sets = set_args(echod.get("args"))
        effective = self.check_config(cm["data"][key], sets)

        # ports and probes: gRPC health on the gRPC port, scrape annotations on the admin port
        ports = {p["name"]: p["containerPort"] for p in echod["ports"]}
        grpc_port, admin_port = port_of(effective["listen"]["grpc"]), port_of(effective["listen"]["admin"])
        self.assertEqual(ports.get("grpc"), grpc_port)
        self.assertEqual(ports.get("admin"), admin_port)
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertIn(probe, echod)
            self.assertIn("grpc", echod[probe], "%s uses the native gRPC probe" % probe)
            self.assertEqual(echod[probe]["grpc"]["port"], grpc_port)
            self.assertEqual(echod[probe]["grpc"].get("service", ""), "")
        if "startupProbe" in echod:
            self.assertEqual(echod["startupProbe"]["grpc"]["port"], grpc_port)
        ann = dep["spec"]["template"]["metadata"]["annotations"]
        self.assertEqual(ann.get("prometheus.io/scrape"), "true")
        self.assertEqual(int(ann.get("prometheus.io/port")), admin_port)
        self.assertEqual(ann.get("prometheus.io/path"), "/metrics")
        svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
        self.assertEqual(svc_ports["grpc"]["port"], GRPC_PORT)
        self.assertIn(svc_ports["grpc"]["targetPort"], ("grpc", grpc_port))
        self.assertIn(svc_ports["admin"]["targetPort"], ("admin", admin_port))
        rest = effective["listen"].get("rest") or ""
        if rest:
            self.assertEqual(ports.get("rest"), port_of(rest), "the REST listener's port")
            self.assertIn("rest", svc_ports, "the Service exposes the REST listener")

        # shutdown: grace >= preStop + announce + drain_timeout
        pre = probe_seconds(echod.get("lifecycle", {}).get("preStop"))
        announce = duration_s(effective["shutdown"].get("announce", "0ms"))
        drain = duration_s(effective["shutdown"]["drain_timeout"])
        grace = pod.get("terminationGracePeriodSeconds", 30)
        self.assertGreaterEqual(grace, pre + announce + drain + 1,
                                "terminationGracePeriodSeconds %s < preStop %s + announce %s + "
                                "drain_timeout %s (+1 s)" % (grace, pre, announce, drain))
        self.assertGreater(announce, 0, "shutdown.announce is set for Kubernetes")

        # one server pod per node, whatever the arm
        anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        self.assertTrue(anti, "required pod anti-affinity")
        term = anti[0]
        self.assertEqual(term["topologyKey"], "kubernetes.io/hostname")
        sel = term["labelSelector"]
        keys = {e["key"]: e["values"] for e in sel.get("matchExpressions", [])}
        keys.update({k: [v] for k, v in sel.get("matchLabels", {}).items()})
        self.assertEqual(keys.get("app.kubernetes.io/name"), ["echod"])
        self.assertNotIn("arm", keys, "the anti-affinity must span arms, not one arm")
        self.assertEqual(dep["spec"]["replicas"], 1)

    def check_config(self, text, sets):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write(text)
            f.flush()
            cmd = [ECHOD_BIN, "--check-config", f.name]
            for s in sets:
                cmd += ["--set", s]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if p.returncode != 0 and re.search(r'unknown key "announce"', p.stderr):
            self.skipTest("this echod does not know shutdown.announce yet: " + p.stderr.strip())
        self.assertEqual(p.returncode, 0, "%s: %s" % (" ".join(cmd), p.stderr))
        return yaml.safe_load(p.stdout)

    # -- k6

    def assert_k6_collector(self, env, resources):
        """k6's Go collector held off below the pod's memory limit: with thousands of VUs the
        default GOGC=100 stalls the arrival-rate scheduler, which then drops iterations."""
        self.assertEqual(env.get("GOGC"), "off")
        units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
        m = re.fullmatch(r"(\d+)(KiB|MiB|GiB)", env.get("GOMEMLIMIT") or "")
        self.assertTrue(m, "GOMEMLIMIT in Go's units: %r" % env.get("GOMEMLIMIT"))
        limit = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", resources["limits"]["memory"])
        self.assertTrue(limit)
        soft = int(m.group(1)) * units[m.group(2)]
        hard = int(limit.group(1)) * units[limit.group(2) + "B"]
        self.assertLessEqual(soft, hard * 0.8, "room below the limit for k6's stacks and buffers")

    def test_k6_job(self):
        docs = kustomize(os.path.join(K8S, "k6"))
        job, cm = one(docs, "Job"), one(docs, "ConfigMap")
        self.check_scripts(cm)
        pod = job["spec"]["template"]["spec"]
        c = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in c["env"]}
        self.assertIn(env["SCRIPT"], cm["data"])
        self.assert_target(env["TARGET"], env["ARM"])
        vol = next(v for v in pod["volumes"] if v.get("configMap"))
        self.assertEqual(vol["configMap"]["name"], cm["metadata"]["name"])
        self.assertEqual(env.get("PROTO_DIR"), next(
            m["mountPath"] for m in c["volumeMounts"] if m["name"] == vol["name"]))
        self.assert_not_on_server_nodes(pod["affinity"])
        self.assert_k6_collector(env, c["resources"])

    def test_k6_testrun(self):
        docs = kustomize(os.path.join(K8S, "k6", "testrun"))
        tr, cm = one(docs, "TestRun"), one(docs, "ConfigMap")
        self.assertEqual(tr["apiVersion"], "k6.io/v1alpha1")
        self.check_scripts(cm)
        self.assertEqual(tr["spec"]["script"]["configMap"]["name"], cm["metadata"]["name"])
        self.assertIn(tr["spec"]["script"]["configMap"]["file"], cm["data"])
        env = {e["name"]: e.get("value") for e in tr["spec"]["runner"]["env"]}
        self.assert_target(env["TARGET"], env["ARM"])
        self.assert_not_on_server_nodes(tr["spec"]["runner"]["affinity"])
        self.assert_k6_collector(env, tr["spec"]["runner"]["resources"])

    def test_make_run_overlays(self):
        with tempfile.TemporaryDirectory() as tmp:
            for args, kind in ((["cached", "unary-ramp.js", "STEP_DURATION=1m"], "Job"),
                               (["--testrun", "rest", "rest-control.js"], "TestRun")):
                with self.subTest(args=args):
                    d = os.path.join(tmp, "run-" + args[-2])
                    p = subprocess.run([os.path.join(K8S, "k6", "make-run"), "--dir", d] + args,
                                       capture_output=True, text=True, cwd=tmp)
                    self.assertEqual(p.returncode, 0, p.stderr)
                    docs = kustomize(d)
                    obj, cm = one(docs, kind), one(docs, "ConfigMap")
                    arm = [a for a in args if not a.startswith("-")][0]
                    script = [a for a in args if a.endswith(".js")][0]
                    suffix = "-%s-%s" % (arm, script[:-3])
                    self.assertEqual(obj["metadata"]["name"], "k6" + suffix)
                    self.assertEqual(cm["metadata"]["name"], "k6-scripts" + suffix)
                    if kind == "Job":
                        c = obj["spec"]["template"]["spec"]["containers"][0]
                        env = {e["name"]: e.get("value") for e in c["env"]}
                        self.assertEqual(env["SCRIPT"], script)
                        self.assertEqual(env["STEP_DURATION"], "1m")
                        self.assertEqual(len(c["env"]), len(env), "no duplicate env names")
                        resources = c["resources"]
                    else:
                        self.assertEqual(obj["spec"]["script"]["configMap"],
                                         {"name": cm["metadata"]["name"], "file": script})
                        env = {e["name"]: e.get("value") for e in obj["spec"]["runner"]["env"]}
                        resources = obj["spec"]["runner"]["resources"]
                    # the overlay's env patch keeps the base's: a TestRun is a custom resource,
                    # whose env list a patch replaces (kustomize has no merge key for it)
                    base = one(kustomize(os.path.join(K8S, "k6") if kind == "Job" else
                                         os.path.join(K8S, "k6", "testrun")), kind)
                    base_env = (base["spec"]["template"]["spec"]["containers"][0]["env"]
                                if kind == "Job" else base["spec"]["runner"]["env"])
                    self.assertLessEqual({e["name"] for e in base_env}, set(env))
                    self.assert_k6_collector(env, resources)
                    self.assertEqual(env["ARM"], arm)
                    self.assert_target(env["TARGET"], arm)

    def test_make_run_parallel(self):
        """--parallelism 2: an Indexed Job of two pods (each its segment, from its index) and a
        TestRun of two runners; both with remote write to Prometheus and the run's tags given on
        k6's command line (a --tag replaces the script's own, and the operator adds two)."""
        with tempfile.TemporaryDirectory() as tmp:
            for variant, kind in (([], "Job"), (["--testrun"], "TestRun")):
                with self.subTest(kind=kind):
                    d = os.path.join(tmp, kind)
                    p = subprocess.run([os.path.join(K8S, "k6", "make-run"), "--dir", d,
                                        "--parallelism", "2", "--prometheus",
                                        "http://prometheus.monitoring:9090/"] + variant +
                                       ["direct", "unary-ramp.js", "STEP_DURATION=1m"],
                                       capture_output=True, text=True, cwd=tmp)
                    self.assertEqual(p.returncode, 0, p.stderr)
                    obj = one(kustomize(d), kind)
                    if kind == "Job":
                        spec = obj["spec"]
                        self.assertEqual((spec["completionMode"], spec["completions"],
                                          spec["parallelism"]), ("Indexed", 2, 2))
                        c = spec["template"]["spec"]["containers"][0]
                        env = {e["name"]: e.get("value") for e in c["env"]}
                        self.assertEqual(env["RUNNERS"], "2")
                        self.assertEqual(env["HOLD_SECONDS"], "0", "no pod held for kubectl cp")
                        script = c["args"][0]
                        for want in ("JOB_COMPLETION_INDEX", "--execution-segment ",
                                     "--execution-segment-sequence", "instance_id=",
                                     "experimental-prometheus-rw", '--tag "arm=${ARM}"'):
                            self.assertIn(want, script)
                        sh = subprocess.run(["sh", "-n", "-c", script], capture_output=True,
                                            text=True)
                        self.assertEqual(sh.returncode, 0, sh.stderr)
                    else:
                        spec = obj["spec"]
                        self.assertEqual(spec["parallelism"], 2)
                        self.assertEqual(spec["arguments"].split(), [
                            "--tag", "arm=direct", "--tag", "script=unary-ramp", "--tag",
                            "testid=direct-unary-ramp", "--out", "experimental-prometheus-rw"])
                        env = {e["name"]: e.get("value") for e in spec["runner"]["env"]}
                    self.assertEqual(env["K6_PROMETHEUS_RW_SERVER_URL"],
                                     "http://prometheus.monitoring:9090/api/v1/write")
                    self.assertEqual(env["K6_PROMETHEUS_RW_TREND_AS_NATIVE_HISTOGRAM"], "true")
                    self.assertEqual(env["STEP_DURATION"], "1m")
            for bad in (["--parallelism", "0"], ["--parallelism", "two"],
                        ["--prometheus", "prometheus:9090"]):
                p = subprocess.run([os.path.join(K8S, "k6", "make-run"), "--dir",
                                    os.path.join(tmp, "bad")] + bad + ["direct", "unary-ramp.js"],
                                   capture_output=True, text=True, cwd=tmp)
                self.assertEqual(p.returncode, 2, bad)
                self.assertIn("make-run: --", p.stderr)

    def test_monitoring(self):
        """k8s/monitoring: the PodMonitor (and the ServiceMonitor) select every arm's server pods
        (Services) on a port they have, copying the arm label; the rules as a PrometheusRule
        are the rule file's groups; the dashboard's ConfigMap carries the Grafana sidecar's
        label and the dashboard itself."""
        docs = kustomize(os.path.join(K8S, "monitoring"))
        pm, rule, cm = one(docs, "PodMonitor"), one(docs, "PrometheusRule"), one(docs, "ConfigMap")
        with open(os.path.join(K8S, "monitoring", "servicemonitor.yaml")) as f:
            sm = yaml.safe_load(f)
        self.assertEqual(pm["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(pm["spec"]["podTargetLabels"], ["arm"])
        self.assertEqual(sm["spec"]["targetLabels"], ["arm"])
        with open(os.path.join(K8S, "monitoring", "echod-rules.yaml")) as f:
            self.assertEqual(rule["spec"]["groups"], yaml.safe_load(f)["groups"])
        self.assertEqual(cm["metadata"]["labels"].get("grafana_dashboard"), "1")
        self.assertEqual(cm["metadata"]["name"], "echod-dashboard")
        dash = json.loads(cm["data"]["echod-dashboard.json"])
        self.assertEqual(dash["uid"], "echod-capacity")

        def selects(sel, labels):
            return all(labels.get(e["key"]) in e["values"] for e in sel.get("matchExpressions", [])
                       if e["operator"] == "In") and all(
                labels.get(k) == v for k, v in sel.get("matchLabels", {}).items())
        for arm in ("direct", "cached"):
            arm_docs = kustomize(os.path.join(K8S, "arms", arm))
            dep, svc = one(arm_docs, "Deployment"), one(arm_docs, "Service")
            tpl = dep["spec"]["template"]
            self.assertTrue(selects(pm["spec"]["selector"], tpl["metadata"]["labels"]), arm)
            self.assertEqual(tpl["metadata"]["labels"]["arm"], arm)
            ports = [p["name"] for c in tpl["spec"]["containers"] for p in c.get("ports", [])]
            for ep in pm["spec"]["podMetricsEndpoints"]:
                self.assertIn(ep["port"], ports)
                self.assertEqual(ep["path"], tpl["metadata"]["annotations"]["prometheus.io/path"])
            self.assertTrue(selects(sm["spec"]["selector"], svc["metadata"]["labels"]), arm)
            self.assertEqual(svc["metadata"]["labels"]["arm"], arm)
            self.assertIn(sm["spec"]["endpoints"][0]["port"], [p["name"] for p in svc["spec"]["ports"]])
        # the load generator's pods are not scraped as servers
        job = one(kustomize(os.path.join(K8S, "k6")), "Job")
        self.assertFalse(selects(pm["spec"]["selector"], job["spec"]["template"]["metadata"]["labels"]))

    def check_scripts(self, cm):
        for f in sorted(os.listdir(K6_DIR)):
            if f.endswith(".js"):
                self.assertEqual(cm["data"].get(f), read(os.path.join(K6_DIR, f)),
                                 "k6-scripts ConfigMap: %s differs from deploy/k6 (k8s/sync-arms)" % f)
        self.assertEqual(cm["data"].get("echo.proto"), read(os.path.join(ROOT, "proto", "echo.proto")))

    def assert_target(self, target, arm):
        """TARGET is the arm's Service on its gRPC port, or its REST port for the REST arm."""
        host, port = target.rsplit(":", 1)
        self.assertEqual(host, "echod-" + arm)
        self.assertIn(arm, arms())
        docs = kustomize(os.path.join(K8S, "arms", arm))
        svc = one(docs, "Service")
        self.assertEqual(svc["metadata"]["name"], host)
        self.assertIn(int(port), [p["port"] for p in svc["spec"]["ports"]])

    def assert_not_on_server_nodes(self, affinity):
        term = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        keys = {e["key"]: e["values"] for e in term["labelSelector"]["matchExpressions"]}
        self.assertEqual(keys.get("app.kubernetes.io/name"), ["echod"])
        self.assertEqual(keys.get("app.kubernetes.io/component"), ["server"])


if __name__ == "__main__":
    main()
