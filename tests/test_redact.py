from tuner._redact import MASK, Redactor, redact_argv, redact_env


def test_secret_env_names_are_masked_and_others_kept():
    env = {"HF_TOKEN": "hf_abc123", "OPENAI_API_KEY": "sk-1234", "DB_PASSWORD": "pw12", "MY_SECRET_X": "s3cr",
           "CUDA_VISIBLE_DEVICES": "0,1", "SGLANG_ENABLE_X": "1"}
    out = redact_env(env)
    assert out["HF_TOKEN"] == out["OPENAI_API_KEY"] == out["DB_PASSWORD"] == out["MY_SECRET_X"] == MASK
    assert out["CUDA_VISIBLE_DEVICES"] == "0,1" and out["SGLANG_ENABLE_X"] == "1"


def test_api_key_in_argv_is_masked_both_spellings():
    assert redact_argv(["python", "--api-key", "k-123", "--port", "1"]) == ["python", "--api-key", MASK, "--port", "1"]
    assert redact_argv(["--api-key=k-123"]) == [f"--api-key={MASK}"]


def test_redactor_masks_secret_values_in_text():
    redact = Redactor({"HF_TOKEN": "hf_abcdef", "PATH": "/usr/bin"}, extra=["key-999"])
    text = "server_args=ServerArgs(api_key='key-999', token=hf_abcdef) PATH=/usr/bin"
    assert redact(text) == f"server_args=ServerArgs(api_key='{MASK}', token={MASK}) PATH=/usr/bin"


def test_stored_log_is_masked_streamed_and_capped_with_the_cut_marked(tmp_path):
    from tuner.trial._record import store_log
    from tuner._redact import Redactor
    from tuner.spec._space import ServerConfig
    from tuner.trial._trial import TrialResult

    secret = "sk-" + "q" * 40
    log = tmp_path / "server.log"
    with log.open("w") as f:
        f.write(f"--api-key {secret}\n")
        for i in range(200_000):
            f.write(f"line {i} token={secret}\n" if i % 5000 == 0 else f"line {i} of the burst\n")
        last = f"last line {secret}\n"
        # One long line, no line end near the tail's cut (about 1 MiB before the end), with secrets packed
        # over the 1,000 bytes around it, so that one straddles the cut wherever the marker's length puts it.
        packed = (secret + "y" * 7) * 20
        after = (1 << 20) - len(last) - 1 - len(packed) // 2
        f.write("y" * 3_000_000 + packed + "y" * after + "\n")
        f.write(last)
    result = TrialResult(0, ServerConfig({}, {}), log_path=log)
    store_log(result, Redactor({"OPENAI_API_KEY": secret}), cap_mb=2)
    kept = log.read_bytes()
    assert secret.encode() not in kept and b"qqqqqqqqqq" not in kept
    assert len(kept) <= 2 * (1 << 20)
    assert kept.startswith(b"--api-key ***\n") and kept.endswith(b"last line ***\n")
    assert b"bytes of this log cut here" in kept and b"server.log-cap-mb: 2" in kept
    assert not (tmp_path / "server.log.tmp").exists()

    small = tmp_path / "small.log"
    small.write_text(f"a {secret} b\n" * 3)
    store_log(TrialResult(0, ServerConfig({}, {}), log_path=small), Redactor({"X_TOKEN": secret}), cap_mb=2)
    assert small.read_text() == "a *** b\n" * 3


def test_storage_url_password_is_masked_and_the_rest_kept():
    from tuner._redact import redact_url

    assert redact_url("postgresql+psycopg2://tuner:s3cr@t@db-host:5432/tuner") == \
        f"postgresql+psycopg2://tuner:{MASK}@db-host:5432/tuner"
    assert redact_url("postgresql://db-host/tuner?user=t&password=s3cr&sslmode=require") == \
        f"postgresql://db-host/tuner?user=t&password={MASK}&sslmode=require"
    for kept in ("sqlite:///8b.db", "sqlite:////abs/trials.db", "postgresql://tuner@db-host/tuner"):
        assert redact_url(kept) == kept
