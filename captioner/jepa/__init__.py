"""JEPAs trained here: a text JEPA (two views of one scene), a next-token baseline of the same backbone
(bad views), an image JEPA (two augmentations), and the encoder that plugs checkpoints
into the registry as ``jepa:<path>``.

Modules: ``model`` (torch modules, SIGReg/VICReg/InfoNCE), ``views`` (corpora, tokens, augmentations),
``train`` (accelerate loop, checkpoints, presets), ``embed`` (embeddings of models in memory), ``encoder``.
The controlled world is ``captioner.world``, the scene lab's experiment ``eval.scenelab``.
Heavy imports (torch, transformers) happen inside those modules, not here.
"""
