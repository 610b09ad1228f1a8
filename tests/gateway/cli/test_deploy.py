"""deploy/: every file parses, the pieces agree with each other and with the gateway's configuration,
and the external checkers (systemd-analyze, docker compose, kustomize) accept them where installed."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import build_parser
from gateway.config import ConfigError, Settings, load_settings
from gateway.config.files import config_yaml
from tests.fakes.paths import REPO

REPO = REPO
DEPLOY = REPO / "deploy"
KUBE = DEPLOY / "kubernetes"
EXAMPLES = DEPLOY / "examples"
UNIT = DEPLOY / "systemd" / "foldgate.service"

#: what the secrets of every example deployment look like in the environment
SECRETS = {
    "TELEGRAM_BOT_TOKEN": "123456:telegram-test-token",
    "DISCORD_BOT_TOKEN": "discord-test-token",
    "OPENAI_API_KEY": "sk-test",
    "FOLDGATE_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": "webhook-secret_1",
}


# --------------------------------------------------------------------------- helpers


def load_yaml(text: str) -> Any:
    return config_yaml().load(text)


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in config_yaml().load_all(path.read_text(encoding="utf-8")) if doc is not None]


def kube_docs() -> list[dict[str, Any]]:
    return [doc for path in sorted(KUBE.rglob("*.yaml")) for doc in load_all(path)]


def kube(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in kube_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def redis_directives(text: str) -> dict[str, str]:
    """``key value`` lines of a redis.conf, comments dropped."""
    pairs = (line.split(None, 1) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    return {key: value.strip() for key, value in pairs}


def unit_entries(text: str) -> dict[str, list[str]]:
    """A systemd unit as 'Section.Key' -> values (keys may repeat)."""
    entries: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        entries.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return entries


def config_path_of(argv: list[str]) -> str:
    """The config file the foldgate CLI would read for these arguments (and that they mean `run`)."""
    args = build_parser().parse_args(argv)
    assert args.command == "run"
    return args.config


def settings_from(config_text: str, tmp_path: Path, env: dict[str, str]) -> Settings:
    path = tmp_path / "config.yaml"
    path.write_text(config_text, encoding="utf-8")
    return load_settings(path, env=env)


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in spec.get("env", []) if "value" in item}


# --------------------------------------------------------------------------- example configurations


@pytest.mark.parametrize("name", ["telegram-polling.yaml", "telegram-webhook.yaml", "discord.yaml"])
def test_examples_load_with_secrets_from_the_environment(name):
    settings = load_settings(EXAMPLES / name, env=SECRETS)
    assert not settings.platforms.local.enabled  # no terminal chat in a service
    assert settings.model.api_key is not None and settings.model.api_key.get_secret_value() == "sk-test"
    platform = settings.platforms.discord if name == "discord.yaml" else settings.platforms.telegram
    assert platform.enabled and platform.token is not None
    # the files themselves hold no secret: without the environment they are refused
    with pytest.raises(ConfigError) as refused:
        load_settings(EXAMPLES / name, env={})
    assert any("token" in problem for problem in refused.value.problems)


def test_the_two_bot_examples_load_as_two_bots_with_their_own_keys_models_and_prompts():
    example = load_settings(EXAMPLES / "two-bots.yaml", env=SECRETS)
    secret = load_yaml((KUBE / "bots" / "secret.example.yaml").read_text())["stringData"]["config.yaml"]
    for settings in (example, load_settings_text(secret)):
        support, ops = settings.each_bot()
        assert (support.name, ops.name) == ("support", "ops")
        assert support.key_prefix == "fg.support" and ops.key_prefix == "fg.ops"
        assert support.settings.model.system_prompt and ops.settings.model.system_prompt
        assert support.settings.model.name != ops.settings.model.name
        assert support.settings.model.api_key is not None  # the key at the top level, from the environment
        assert not support.settings.platforms.local.enabled and not ops.settings.platforms.local.enabled
    deployment = kube("Deployment", "foldgate-bots")
    assert deployment["spec"]["replicas"] >= 2  # polling replicas: the lease keeps one poller per token
    volumes = {volume["name"]: volume for volume in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["secret"]["secretName"] == "foldgate-bots-config"  # the tokens are in it


def load_settings_text(text: str) -> Settings:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(text, encoding="utf-8")
        return load_settings(path, env=SECRETS)


def test_telegram_examples_use_their_modes_and_the_webhook_listens_beyond_loopback():
    polling = load_settings(EXAMPLES / "telegram-polling.yaml", env=SECRETS).platforms.telegram
    webhook = load_settings(EXAMPLES / "telegram-webhook.yaml", env=SECRETS).platforms.telegram
    assert polling.mode == "polling"
    assert webhook.mode == "webhook" and webhook.listen_host == "0.0.0.0"
    assert webhook.webhook_url and webhook.webhook_url.endswith(webhook.webhook_path)
    assert webhook.webhook_secret is not None


def test_the_env_example_names_every_secret_the_examples_need():
    names = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", (DEPLOY / "foldgate.env.example").read_text(), re.M))
    assert set(SECRETS) <= names


# --------------------------------------------------------------------------- redis


def test_redis_conf_keeps_sessions_durable_and_unevicted():
    directives = redis_directives((DEPLOY / "redis.conf").read_text())
    assert directives["appendonly"] == "yes"
    assert directives["appendfsync"] == "everysec"
    assert directives["maxmemory-policy"] == "noeviction"


# --------------------------------------------------------------------------- docker


def test_compose_runs_the_gateway_after_a_healthy_durable_redis():
    compose = load_yaml((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"redis", "gateway"}

    redis = services["redis"]
    assert redis["image"].split(":")[0] == "redis" and redis["image"].split(":")[1].startswith("7")
    assert redis["healthcheck"]["test"][-2:] == ["redis-cli", "ping"]
    conf_mount = next(m for m in redis["volumes"] if m.startswith("./redis.conf:"))
    assert conf_mount.split(":")[1] in redis["command"]  # the mounted file is the one redis-server reads
    assert redis_directives((DEPLOY / "redis.conf").read_text())["appendonly"] == "yes"
    data_volume = next(m for m in redis["volumes"] if m.split(":")[1] == "/data")
    assert data_volume.split(":")[0] in compose["volumes"]

    gateway = services["gateway"]
    assert gateway["depends_on"]["redis"]["condition"] == "service_healthy"
    assert gateway["env_file"] == ["foldgate.env"]
    assert gateway["environment"]["FOLDGATE_REDIS__URL"].startswith("redis://redis:6379")
    config = config_path_of(gateway["command"])
    source = next(m.rsplit(":", 2)[0] for m in gateway["volumes"] if m.rsplit(":", 2)[1] == config)
    default_file = re.fullmatch(r"\$\{FOLDGATE_CONFIG_FILE:-(.+)\}", source).group(1)
    assert (DEPLOY / default_file).is_file()
    assert (DEPLOY / gateway["build"]["context"] / gateway["build"]["dockerfile"]).is_file()


def test_dockerfile_installs_the_package_and_runs_it_unprivileged():
    lines = [line.strip() for line in (DEPLOY / "docker" / "Dockerfile").read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    assert instructions[0] == "FROM python:3.11-slim"
    assert any(line.startswith("RUN pip install .") for line in instructions)
    user = [line.split()[1] for line in instructions if line.startswith("USER ")]
    assert user and user[-1] not in ("root", "0")
    # every COPY source exists in the build context (the repository root) ...
    copied = [line.split()[1:-1] for line in instructions if line.startswith("COPY ")]
    sources = {source for group in copied for source in group}
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: not in the repository"
    # ... and every package the distribution ships is among them
    for package in ("agent", "gateway", "plugins", "evals"):
        assert package in sources
    cmd = next(line for line in instructions if line.startswith("CMD "))
    entry = next(line for line in instructions if line.startswith("ENTRYPOINT "))
    assert load_yaml(entry.split(None, 1)[1]) == ["foldgate"]
    assert config_path_of(load_yaml(cmd.split(None, 1)[1])) == "/etc/foldgate/config.yaml"


def _compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    return [standalone] if standalone else None


def test_docker_compose_accepts_the_file(tmp_path):
    command = _compose_command()
    if command is None:
        pytest.skip("no docker compose on this machine")
    env_file = DEPLOY / "foldgate.env"
    created = not env_file.exists()
    if created:
        shutil.copy(DEPLOY / "foldgate.env.example", env_file)
    try:
        result = subprocess.run(
            [*command, "-f", str(DEPLOY / "docker-compose.yml"), "config", "--quiet"],
            capture_output=True,
            text=True,
            cwd=DEPLOY,
        )
    finally:
        if created:
            env_file.unlink()
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- systemd


def test_unit_runs_the_gateway_as_a_dedicated_user_with_hardening():
    unit = unit_entries(UNIT.read_text())
    exec_start = shlex.split(unit["Service.ExecStart"][0])
    assert Path(exec_start[0]).name == "foldgate"
    assert config_path_of(exec_start[1:]) == "/etc/foldgate/config.yaml"
    assert unit["Service.User"][0] not in ("root", "0")
    assert unit["Service.Restart"] == ["on-failure"]
    assert unit["Service.NoNewPrivileges"] == ["yes"]
    assert unit["Service.PrivateTmp"] == ["yes"]
    assert unit["Service.ProtectSystem"] == ["strict"]
    home = next(v.split("=", 1)[1] for v in unit["Service.Environment"] if v.startswith("FOLDGATE_HOME="))
    assert home in " ".join(unit["Service.ReadWritePaths"]).split()
    assert unit["Service.StateDirectory"] == [Path(home).name] and home.startswith("/var/lib/")
    sysusers = (DEPLOY / "systemd" / "foldgate.sysusers.conf").read_text()
    assert re.search(rf"^u\s+{unit['Service.User'][0]}\s", sysusers, re.M)


def test_systemd_analyze_verifies_the_unit(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("no systemd-analyze on this machine")
    installed = shutil.which("foldgate") or str(Path(os.sys.executable).with_name("foldgate"))
    if not Path(installed).exists():
        pytest.skip("the foldgate command is not installed here")
    text = UNIT.read_text()
    packaged = shlex.split(unit_entries(text)["Service.ExecStart"][0])[0]
    # the unit names the path of a production install; verify it against this machine's install
    (tmp_path / "foldgate.service").write_text(text.replace(packaged, installed))
    result = subprocess.run(
        [analyze, "verify", "--man=no", str(tmp_path / "foldgate.service")], capture_output=True, text=True
    )
    assert result.returncode == 0 and not result.stderr.strip() and not result.stdout.strip(), result.stderr


# --------------------------------------------------------------------------- kubernetes


def test_every_manifest_parses_and_names_its_kind():
    files = sorted(KUBE.rglob("*.yaml"))
    assert files
    for path in files:
        docs = load_all(path)
        assert docs, path
        for doc in docs:
            assert doc.get("apiVersion") and doc.get("kind"), path
            if doc["kind"] != "Kustomization":
                assert doc["metadata"]["name"], path


@pytest.mark.parametrize("folder", [KUBE, KUBE / "discord", KUBE / "bots"])
def test_kustomization_lists_every_manifest_but_the_secret_example(folder):
    kustomization = load_yaml((folder / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present - {"secret.example.yaml"}


def test_the_base_starts_no_discord_pods_unless_asked():
    base = [doc for path in KUBE.glob("*.yaml") for doc in load_all(path)]
    assert not [doc for doc in base if "discord" in doc.get("metadata", {}).get("name", "")]
    images = [load_yaml((folder / "kustomization.yaml").read_text())["images"] for folder in (KUBE, KUBE / "discord")]
    assert images[0] == images[1]  # both run the same image


def test_kustomize_builds_the_manifests():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on this machine")
    result = subprocess.run([kubectl, "kustomize", str(KUBE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    kinds = [doc["kind"] for doc in config_yaml().load_all(result.stdout) if doc]
    assert {"Deployment", "StatefulSet", "Service", "Ingress", "ConfigMap"} <= set(kinds)
    assert "Secret" not in kinds


def test_webhook_deployment_has_replicas_and_probes_on_the_listener(tmp_path):
    deployment = kube("Deployment", "foldgate-telegram")
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"].items() >= deployment["spec"]["selector"]["matchLabels"].items()
    gateway = container(deployment)
    ports = {port["name"]: port["containerPort"] for port in gateway["ports"]}
    for probe in ("readinessProbe", "livenessProbe"):
        assert gateway[probe]["tcpSocket"]["port"] in ports

    # the configuration mounted into the pod is the webhook example, and the probed port is its listener
    configmap = kube("ConfigMap", "foldgate-telegram-config")
    mount = next(m for m in gateway["volumeMounts"] if m["name"] == "config")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == "foldgate-telegram-config"
    assert config_path_of(gateway["args"]) == f"{mount['mountPath']}/config.yaml"
    shipped = configmap["data"]["config.yaml"]
    assert load_yaml(shipped) == load_yaml((EXAMPLES / "telegram-webhook.yaml").read_text())
    env = {**SECRETS, **env_of(gateway)}
    settings = settings_from(shipped, tmp_path, env)
    telegram = settings.platforms.telegram
    assert telegram.mode == "webhook" and ports[gateway["readinessProbe"]["tcpSocket"]["port"]] == telegram.listen_port
    assert settings.redis.url == env["FOLDGATE_REDIS__URL"]
    assert gateway["envFrom"][0]["secretRef"]["name"] == kube_secret_example()["metadata"]["name"]

    # Service -> pods, Ingress -> Service on exactly the webhook path
    service = kube("Service", "foldgate-telegram")
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] in ports
    ingress = kube("Ingress", "foldgate-telegram")
    paths = [p for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert [p["path"] for p in paths] == [telegram.webhook_path]
    assert paths[0]["backend"]["service"]["name"] == "foldgate-telegram"
    assert ingress["spec"]["rules"][0]["host"] in telegram.webhook_url
    assert kube("PodDisruptionBudget", "foldgate-telegram")["spec"]["minAvailable"] < deployment["spec"]["replicas"]


def kube_secret_example() -> dict[str, Any]:
    (secret,) = load_all(KUBE / "secret.example.yaml")
    assert secret["kind"] == "Secret"
    return secret


def test_secret_example_carries_what_the_configs_read_from_the_environment():
    assert set(SECRETS) <= set(kube_secret_example()["stringData"])


def test_redis_statefulset_persists_an_append_only_file():
    statefulset = kube("StatefulSet", "foldgate-redis")
    redis = container(statefulset)
    claims = {claim["metadata"]["name"] for claim in statefulset["spec"]["volumeClaimTemplates"]}
    data_mount = next(m for m in redis["volumeMounts"] if m["mountPath"] == "/data")
    assert data_mount["name"] in claims
    conf_path = redis["args"][-1]
    conf_mount = next(m for m in redis["volumeMounts"] if conf_path.startswith(m["mountPath"] + "/"))
    conf_volume = next(v for v in statefulset["spec"]["template"]["spec"]["volumes"] if v["name"] == conf_mount["name"])
    conf = kube("ConfigMap", conf_volume["configMap"]["name"])["data"][Path(conf_path).name]
    assert redis_directives(conf) == redis_directives((DEPLOY / "redis.conf").read_text())
    for probe in ("readinessProbe", "livenessProbe"):
        assert redis[probe]["exec"]["command"] == ["redis-cli", "ping"]
    service = kube("Service", "foldgate-redis")
    assert service["spec"]["ports"][0]["port"] == 6379
    assert (
        f"redis://{service['metadata']['name']}:6379"
        in env_of(container(kube("Deployment", "foldgate-telegram")))["FOLDGATE_REDIS__URL"]
    )


def test_discord_pods_split_the_shards_between_them(tmp_path):
    """Run each pod's start script with a stand-in ``foldgate``: together they cover every shard once."""
    statefulset = kube("StatefulSet", "foldgate-discord")
    gateway = container(statefulset)
    assert gateway["command"][:2] == ["/bin/sh", "-c"]
    script = gateway["args"][0]
    configmap = kube("ConfigMap", "foldgate-discord-config")
    shipped = configmap["data"]["config.yaml"]
    assert load_yaml(shipped) == load_yaml((EXAMPLES / "discord.yaml").read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "foldgate"
    stand_in.write_text('#!/bin/sh\nprintf "%s\\n" "$FOLDGATE_PLATFORMS__DISCORD__SHARD_IDS" "$@"\n')
    stand_in.chmod(0o755)

    replicas = statefulset["spec"]["replicas"]
    assert replicas >= 2
    seen: list[int] = []
    for ordinal in range(replicas):
        env = {
            **env_of(gateway),
            "HOSTNAME": f"{statefulset['metadata']['name']}-{ordinal}",
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
        }
        result = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True)
        shard_ids, *argv = result.stdout.splitlines()
        assert config_path_of(argv) == "/etc/foldgate/config.yaml"
        pod_env = {**SECRETS, **env, "FOLDGATE_PLATFORMS__DISCORD__SHARD_IDS": shard_ids}
        settings = settings_from(shipped, tmp_path, pod_env)
        discord = settings.platforms.discord
        assert discord.enabled and discord.shard_count == int(env["FOLDGATE_PLATFORMS__DISCORD__SHARD_COUNT"])
        assert discord.shard_ids and len(discord.shard_ids) == int(env["SHARDS_PER_POD"])
        seen.extend(discord.shard_ids)
    assert sorted(seen) == list(range(int(env_of(gateway)["FOLDGATE_PLATFORMS__DISCORD__SHARD_COUNT"])))


def test_every_service_manager_waits_longer_than_the_gateway_lets_turns_finish():
    """A SIGTERM gives running turns TERM_GRACE_SECONDS; a manager that kills sooner cuts replies off."""
    from gateway.run.signals import TERM_GRACE_SECONDS

    def seconds(text: str) -> float:
        return float(text.rstrip("s"))

    unit = unit_entries(UNIT.read_text())
    compose = load_yaml((DEPLOY / "docker-compose.yml").read_text())
    waits = {
        "systemd TimeoutStopSec": seconds(unit["Service.TimeoutStopSec"][-1]),
        "compose stop_grace_period": seconds(compose["services"]["gateway"]["stop_grace_period"]),
    }
    for workload in (kube("Deployment", "foldgate-telegram"), kube("StatefulSet", "foldgate-discord")):
        waits[workload["metadata"]["name"]] = float(
            workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        )
    assert all(wait > TERM_GRACE_SECONDS for wait in waits.values()), waits
    for path in (UNIT, DEPLOY / "docker-compose.yml", KUBE / "deployment.yaml"):
        assert f"up to {TERM_GRACE_SECONDS:g} s" in path.read_text(), path  # the comments say the same figure
