"""Encoders: HF models built from a config (no download), and the real offline packages (slow)."""
import numpy as np
import pytest
from PIL import Image

from captioner.encoders import get_encoder, list_encoders
from captioner.errors import CaptionerError


def _img(color, size=(40, 30)):
    return Image.new("RGB", size, color)


@pytest.fixture(scope="module")
def tiny_vision_models(tmp_path_factory):
    """DINOv2, CLIP and ViT backbones with random weights, saved like hub snapshots."""
    import torch
    from transformers import CLIPConfig, CLIPModel, Dinov2Config, Dinov2Model, ViTConfig, ViTModel

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("hf")
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                 patch_size=8)
    paths = {}
    for name, cfg, cls in [("dinov2", Dinov2Config(**small), Dinov2Model), ("vit", ViTConfig(**small), ViTModel)]:
        cls(cfg).save_pretrained(root / name)
        paths[name] = root / name
    clip = CLIPConfig(text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=64, vocab_size=100),
                      vision_config=small, projection_dim=24)
    CLIPModel(clip).save_pretrained(root / "clip")
    paths["clip"] = root / "clip"
    return paths


@pytest.mark.parametrize("which,pooling,dim", [("dinov2", "cls", 32), ("dinov2", "mean", 32), ("vit", "cls", 32),
                                              ("clip", "cls", 32), ("clip", "proj", 24)])
def test_hf_image_encoders_from_config(tiny_vision_models, which, pooling, dim):
    enc = get_encoder(f"hf-image:{tiny_vision_models[which]}", pooling=pooling, cache=False)
    z = enc.encode([_img((255, 0, 0)), _img((0, 0, 255)), _img((255, 0, 0))])
    assert z.shape == (3, dim) and z.dtype == np.float32
    np.testing.assert_allclose(z[0], z[2], rtol=1e-5, atol=1e-6)  # deterministic
    assert not np.allclose(z[0], z[1])  # depends on the pixels
    fp = enc.fingerprint()
    assert fp["modality"] == "image" and fp["dim"] == dim and len(fp["weights_hash"]) == 16


@pytest.fixture(scope="module")
def tiny_text_models(tmp_path_factory):
    """A BERT sentence encoder and a Llama causal LM with random weights and the MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

    from captioner.encoders.offline import minilm_l6_path

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("hf-text")
    tok = AutoTokenizer.from_pretrained(str(minilm_l6_path()))
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(root / "bert")
    LlamaForCausalLM(LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=3,
                                 num_attention_heads=2, num_key_value_heads=2, intermediate_size=64)
                     ).save_pretrained(root / "llama")
    for d in ("bert", "llama"):
        tok.save_pretrained(root / d)
    return root


def test_hf_text_sentence_and_causal(tiny_text_models):
    bert = get_encoder(f"hf-text:{tiny_text_models / 'bert'}", cache=False)
    z = bert.encode(["a red car", "a blue boat", "a red car"])
    assert z.shape == (3, 32) and not bert.causal
    np.testing.assert_allclose(z[0], z[2], atol=1e-6)
    llama_last = get_encoder(f"hf-text:{tiny_text_models / 'llama'}", cache=False)
    llama_l1 = get_encoder(f"hf-text:{tiny_text_models / 'llama'}", layer=1, cache=False)
    assert llama_last.causal and llama_l1.pooling == "mean-layer1"
    a, b = llama_last.encode(["a red car"]), llama_l1.encode(["a red car"])
    assert a.shape == b.shape == (1, 32) and not np.allclose(a, b)
    # padding must not change a text's embedding (mask-weighted mean)
    alone = bert.encode(["short"])
    padded = bert.encode(["short", "a much longer sentence that forces padding of the first one"])[:1]
    np.testing.assert_allclose(alone, padded, atol=1e-5)


def test_unknown_encoder_and_empty_text(tmp_path):
    with pytest.raises(CaptionerError, match="unknown encoder"):
        get_encoder("nope")
    with pytest.raises(CaptionerError, match="no hub access"):
        get_encoder(f"hf-image:{tmp_path / 'missing'}-not/a-real-model", cache=False)
    with pytest.raises(CaptionerError, match="no CUDA GPU|unknown device"):
        get_encoder("efficientnet-lite0", device="cuda:0" if not __import__("torch").cuda.is_available() else "tpu")
    names = [r["name"] for r in list_encoders()]
    assert "efficientnet-lite0" in names and "minilm-l6" in names


@pytest.mark.slow
def test_offline_encoders_real_weights():
    eff = get_encoder("efficientnet-lite0")
    z = eff.encode([_img((255, 0, 0), (224, 224)), _img((0, 128, 0), (100, 300))])
    assert z.shape == (2, 1280) and np.isfinite(z).all() and (z >= 0).all()  # ReLU6 features, mean pooled
    mini = get_encoder("minilm-l6")
    t = mini.encode(["A koala.", "A koala bear.", "A fire truck."])
    np.testing.assert_allclose(np.linalg.norm(t, axis=1), 1, atol=1e-5)
    assert t[0] @ t[1] > t[0] @ t[2] + 0.2  # real semantics: koala ~ koala bear
    with pytest.raises(CaptionerError, match="empty"):
        mini.encode(["fine", "  "])
    l3 = get_encoder("minilm-l3")
    u = l3.encode(["A koala.", "A koala bear.", "A fire truck."])
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    assert u.shape == (3, 384) and u[0] @ u[1] > u[0] @ u[2]


@pytest.mark.slow
def test_smollm2_layers(shared_home, monkeypatch):
    monkeypatch.setenv("CAPTIONER_HOME", str(shared_home))
    last = get_encoder("smollm2-135m")
    mid = get_encoder("smollm2-135m@15")
    a, b = last.encode(["A koala.", "A fire truck."]), mid.encode(["A koala.", "A fire truck."])
    assert a.shape == b.shape == (2, 576) and np.isfinite(a).all() and not np.allclose(a, b)
    assert last.fingerprint()["weights_hash"] == mid.fingerprint()["weights_hash"]


@pytest.mark.slow
def test_efficientnet_onnx_backend_matches_torch(captioner_home, caplog, monkeypatch):
    """The onnxruntime path (exported once under the home folder, checked on load) gives the torch path's
    embeddings to float noise; backend="torch" never touches onnxruntime; a failed export falls back."""
    pytest.importorskip("onnxruntime")
    from captioner.encoders import onnx_export

    ims = [_img((255, 0, 0), (224, 224)), _img((0, 128, 0), (100, 300)),
           Image.fromarray(np.random.default_rng(0).integers(0, 256, (90, 120, 3), dtype=np.uint8))]
    fast = get_encoder("efficientnet-lite0", backend="onnx", cache=False)
    slow = get_encoder("efficientnet-lite0", backend="torch", cache=False)
    a, b = fast.encode(ims), slow.encode(ims)
    assert fast.onnx_model() is not None and slow.onnx_model() is None and slow._ort is None
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4 * float(np.abs(b).max()))
    assert fast.fingerprint() == slow.fingerprint()  # the same embeddings: the same cache entries
    assert len(list((captioner_home / "onnx").glob("efficientnet-lite0-224px-*.onnx"))) == 1
    again = get_encoder("efficientnet-lite0", backend="auto", cache=False)
    np.testing.assert_array_equal(again.encode(ims[:1]), fast.encode(ims[:1]))  # the cached export
    with pytest.raises(CaptionerError, match="image backend must be"):
        get_encoder("efficientnet-lite0", backend="tensorrt", cache=False)

    def broken(enc, check=True):
        raise RuntimeError("no exporter here")

    monkeypatch.setattr(onnx_export.OnnxModel, "for_encoder", broken)
    auto = get_encoder("efficientnet-lite0", backend="auto", cache=False)
    np.testing.assert_array_equal(auto.encode(ims), b)  # torch, silently but for one log line
    assert "no exporter here" in caplog.text
    with pytest.raises(CaptionerError, match="onnx backend is unavailable"):
        get_encoder("efficientnet-lite0", backend="onnx", cache=False).encode(ims[:1])
