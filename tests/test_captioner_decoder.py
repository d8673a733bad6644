"""The text-only caption decoder: vocabulary, memorisation, beam search, checkpoints that refuse another
encoder, and resumption that reproduces an uninterrupted run exactly."""
import numpy as np
import pytest

from captioner.decoder import Vocab, load_decoder, preset
from captioner.decoder_train import train_decoder
from captioner.errors import CacheMismatchError, CaptionerError

TEXTS = ["a koala.", "a red fire truck.", "a green frog on a leaf.", "a yellow banana.",
         "the big blue whale in the sea.", "a cup of coffee."]
FP = {"name": "fake-text", "dim": 24, "pooling": "hash", "weights_hash": "w1"}


def corpus():
    E = np.random.default_rng(0).standard_normal((len(TEXTS), 24)).astype(np.float32)
    return TEXTS, E


def test_vocab_round_trip_and_priority():
    v = Vocab.build(TEXTS)
    ids = v.encode(["a red frog.", "an unseenword"], max_len=8)
    assert ids[0, 0] == 1 and 2 in ids[0].tolist()  # BOS ... EOS
    assert v.decode(ids[0, 1:]) == "a red frog."
    assert 3 in ids[1].tolist()  # pieces outside the corpus are UNK, and UNK is never decoded
    # a capped vocabulary keeps every piece of the priority texts
    small = Vocab.build(TEXTS, max_size=4 + 3, priority=1)
    assert small.decode(small.encode(["a koala."], 8)[0, 1:]) == "a koala."
    assert small.size <= 7 + 2  # "a koala." alone has more pieces than the cap allows for the rest


def test_bad_corpus_is_refused(tmp_path):
    with pytest.raises(CaptionerError, match="empty"):
        train_decoder([], np.zeros((0, 4)), FP, tmp_path / "d.pt")
    with pytest.raises(CaptionerError, match="2 texts but 3 embeddings"):
        train_decoder(["a", "b"], np.zeros((3, 4)), FP, tmp_path / "d.pt")
    with pytest.raises(CaptionerError, match="unknown decoder preset"):
        preset("huge")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tmp_path_factory.mktemp("dec") / "decoder.pt"
    texts, E = corpus()
    m, t = preset("tiny", steps=120)
    dec = train_decoder(texts, E, FP, path, m, t, progress=False)
    return dec, path


@pytest.mark.slow
def test_loss_falls_and_greedy_reproduces_memorised_captions(trained):
    dec, _ = trained
    losses = dec.meta["losses"]
    assert np.mean(losses[-10:]) < 0.1 * np.mean(losses[:10])
    texts, E = corpus()
    assert dec.generate(E) == texts
    assert dec.generate(E, beam=3) == texts


@pytest.mark.slow
def test_checkpoint_reloads_and_refuses_another_encoder(trained):
    dec, path = trained
    texts, E = corpus()
    again = load_decoder(path, text_encoder=FP)
    assert again.generate(E[:2]) == texts[:2]
    with pytest.raises(CacheMismatchError, match="trained for text encoder 'fake-text'.*weights_hash"):
        load_decoder(path, text_encoder={**FP, "weights_hash": "other"})
    with pytest.raises(CaptionerError, match="expects \\(N, 24\\)"):
        again.generate(np.zeros((1, 8), np.float32))


@pytest.mark.slow
def test_resumed_training_equals_uninterrupted(tmp_path):
    texts, E = corpus()
    m, t = preset("tiny", steps=40, save_every=20)
    full = train_decoder(texts, E, FP, tmp_path / "full.pt", m, t, progress=False)
    # stop after 20 steps (as a crash after the step-20 checkpoint would), then resume to 40
    part = train_decoder(texts, E, FP, tmp_path / "part.pt", m, t, progress=False, stop_after=20)
    assert part.meta["step"] == 20
    with pytest.raises(CaptionerError, match="stopped at step 20 of 40"):
        load_decoder(tmp_path / "part.pt", text_encoder=FP)
    resumed = train_decoder(texts, E, FP, tmp_path / "part.pt", m, t, progress=False)
    assert resumed.meta["step"] == 40
    assert resumed.meta["losses"] == full.meta["losses"]
    with pytest.raises(CacheMismatchError, match="another corpus or config"):
        train_decoder(texts[:3], E[:3], FP, tmp_path / "part.pt", m, t, progress=False)


def test_detokenize_joins_word_pieces_as_english():
    from captioner.decoder import detokenize

    assert detokenize("a jeep ' s!") == "a jeep's!"
    assert detokenize("a hair clip \u2019 s wing.") == "a hair clip\u2019s wing."
    assert detokenize("it ' s a ( big ) dog , well - known .") == "it's a (big) dog, well-known."
    assert detokenize("3. 5 km and 3 , 000 \" x \"") == '3.5 km and 3,000 "x"'


def test_ema_weights_are_served_saved_and_resumed(tmp_path, monkeypatch):
    """With ``ema`` the decoder serves a moving average of its weights, load_decoder reads the same average back,
    a resumed run ends on the same average as an uninterrupted one, and a checkpoint saved before the setting
    existed (no "ema" in its train config) is still taken as trained without it."""
    import torch

    texts, E = corpus()
    m, t = preset("tiny", steps=30, save_every=10, ema=0.9)
    full = train_decoder(texts, E, FP, tmp_path / "full.pt", m, t, progress=False)
    state = torch.load(tmp_path / "full.pt", weights_only=False)
    last, avg = state["model"], state["ema"]
    served = full.model.state_dict()
    assert all(torch.equal(served[k], avg[k]) for k in avg)
    assert any(not torch.equal(last[k], avg[k]) for k in avg if last[k].is_floating_point())
    again = load_decoder(tmp_path / "full.pt", text_encoder=FP)
    assert all(torch.equal(again.model.state_dict()[k], avg[k]) for k in avg)
    train_decoder(texts, E, FP, tmp_path / "part.pt", m, t, progress=False, stop_after=10)
    resumed = train_decoder(texts, E, FP, tmp_path / "part.pt", m, t, progress=False)
    assert all(torch.allclose(resumed.model.state_dict()[k], avg[k]) for k in avg)

    m0, t0 = preset("tiny", steps=10, save_every=10)
    train_decoder(texts, E, FP, tmp_path / "old.pt", m0, t0, progress=False)
    old = torch.load(tmp_path / "old.pt", weights_only=False)
    assert old["ema"] is None
    old["train_config"].pop("ema")  # as written before the setting existed
    torch.save(old, tmp_path / "old.pt")
    import captioner.decoder_train as dt

    monkeypatch.setattr(dt, "_step", lambda *a, **k: pytest.fail("a complete old checkpoint was retrained"))
    assert train_decoder(texts, E, FP, tmp_path / "old.pt", m0, t0, progress=False).meta["step"] == 10
