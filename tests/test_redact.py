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
