"""Exact spatially-parallel VAE decode: the latent split by rows over a process group.

``pipeline.vae: parallel`` (like xDiT's DistVAE / patch-parallel VAE). Every rank of the
group holds only its own band of rows (the height axis, dim -2) of every activation of the
decoder, and the gathered frames equal one process's ``vae.decode`` of the whole latent up to
float rounding::

    pvae = parallelize_decoder(vae, group)          # once; the original vae is left as it is
    video = decode_rows(pvae, latents, group, lambda v, z: v.decode(z, return_dict=False)[0])

One module per job (this file holds no code; import from the module):

* :mod:`.bands`: the rows split over the ranks (``split_rows``) and the bands gathered back
  (``gather_rows``)
* :mod:`.conv_geometry`: the rows a convolution needs from each neighbour band (``halo_rows``,
  ``padding_in_forward``), or why it cannot run on bands
* :mod:`.halo_conv`: ``HaloConv``, the halo exchange around a convolution
* :mod:`.group_norm`: ``DistGroupNorm``, group norm with the whole image's statistics
* :mod:`.gathered_attention`: ``GatherRows``, an attention block run on the gathered tensor
  (``attention_types``: the blocks that need it)
* :mod:`.surgery`: ``parallelize_decoder``, the copy of the VAE with its decoder's modules replaced
* :mod:`.decode`: the entry points the pipelines call, ``decode_rows`` and ``row_parallel_vae``
  (``RowBands``)

Method: module surgery on a copy of the VAE (no function or class is patched). In the copy's
``decoder`` and ``post_quant_conv``:

* a convolution whose kernel is taller than one row (stride 1, dilation 1, "same" height
  padding) becomes :class:`.halo_conv.HaloConv`: before the convolution the band is extended by the
  ``p = (k - 1) // 2`` rows it needs from each neighbour band (the previous rank's last p
  rows on top, the next rank's first p rows below), the convolution runs unchanged, and the p
  output rows computed from each extension are cropped. The first and last rank extend nothing
  on their outer side, where the convolution's own padding applies as it does for the whole
  image. Every output row therefore sees exactly the input rows it sees in the whole image.
  ``WanCausalConv3d``'s cache of earlier frames (``cache_x``) is a band of the same rows and
  is extended with it, in the same exchange. A causal convolution that pads its own input in
  its forward before a padding-0 convolution (:func:`.conv_geometry.padding_in_forward`: Wan's and Qwen-Image's
  ``_padding``, HunyuanVideo's ``time_causal_padding`` with replicate padding) is wrapped whole,
  so its padding, of any mode, reaches only the image's edges and the cropped rows.
* ``nn.GroupNorm`` becomes :class:`.group_norm.DistGroupNorm`: the mean and variance of each group are
  taken over the whole image (sums and counts all-reduced over the group, two passes,
  float64 accumulation), then the same affine.
* an attention block (diffusers ``Attention`` in ``AutoencoderKL``'s mid block,
  ``WanAttentionBlock`` in the Wan2.1 decoder, ``QwenImageAttentionBlock``, and
  HunyuanVideo's whole mid block, whose attention mixes frames, rows and columns under one
  frame-causal mask) becomes :class:`.gathered_attention.GatherRows`: the whole tensor is
  gathered, the block runs on it unchanged, and each rank keeps its own rows. Everything inside
  the block sees the whole tensor and is left alone.
* what is per position (Wan's RMS norm over channels, activations, 1x1 and 1-row-high
  convolutions such as Wan's temporal ``time_conv``, the nearest upsampling by 2 of both
  decoders) needs nothing: a band of its input gives exactly the band of its output.

A module the method cannot make exact (a strided, dilated or transposed convolution, a
non-"same" height padding, pooling, batch/instance norm, diffusers' ``SpatialNorm``, an
upsampling by a fractional factor or to a fixed size, an unknown attention block, a block that
injects noise drawn for its rows: LTX-Video 0.9.1's ``decoder_inject_noise``) makes
:func:`.surgery.parallelize_decoder` raise ``ValueError`` naming it, rather than decode wrongly.

:func:`.decode.row_parallel_vae` hands a caller that decodes the whole latent itself (a diffusers
pipeline's decode tail: generate) a copy whose decoder takes this rank's band of
rows and returns the whole output (:class:`.decode.RowBands`); everything around the decoder runs
unchanged on every rank. Measured on every family's tiny VAE (SD3.5, CogVideoX,
LTX-Video, Qwen-Image, HunyuanVideo; tests/runtime/pipelines/test_vae_parallel_families.py):
within 7e-6 of the single decode, 2 and 4 ranks, uneven bands.

Exactness: each rank computes the same sums as the single process for its rows (the same
inputs, the same weights, the same kernels); only float rounding differs, where a library picks
a different summation order for a differently shaped tensor (a convolution over fewer rows,
group-norm statistics summed in pieces). Measured in float32 on tiny random Wan2.1 and Flux.1
VAEs (tests/runtime/pipelines/test_vae_parallel.py): single convolutions on bands 0, GroupNorm
no further from a float64 GroupNorm than torch's own, whole decodes within 5e-6 of the single
decode on outputs of order 1. That is the single float32 decode's own distance from a float64
decode (3e-6 to 9e-6), and the parallel decode is as close to the float64 decode as the
single float32 decode is.

Wan2.1 (``AutoencoderKLWan``): ``decode`` runs ``post_quant_conv`` and then the decoder frame
by frame with its feature cache (``clear_cache`` / ``_feat_map``); every cached tensor is a
band of this rank's rows, so the cache needs nothing but the halo of ``cache_x``. The
temporal upsampling (``WanResample`` "upsample3d": the "Rep" marker on the first frame, the
(3, 1, 1) ``time_conv``) is per position. The final ``clamp`` is per position. Tiling must be
off (it would cut the band again, with blending): the copy has ``use_tiling = False``;
``use_slicing`` (one sample at a time) is exact and kept.

Communication per decode (``n`` ranks, every collective within ``group``; the ranks run the
same layers in the same order, so the collectives pair up):

* one ``all_gather`` per halo convolution call of a ``[..., 2p, W]`` edge tensor (this
  rank's top and bottom p rows; ``cache_x`` rides along) -- every rank receives all ``n``
  edges and keeps its two neighbours': ``n * 2p`` rows received, cheap for the group sizes
  a VAE is split over (point-to-point would receive ``2p``);
* two ``all_reduce`` of ``[batch, groups]`` float64 sums per GroupNorm, plus the counts;
* one gather of the whole tensor per attention block, at latent resolution (both decoders
  attend only in the mid block), plus one of the row counts;
* the final gather of the decoded bands to every rank (:func:`.decode.decode_rows`).

Memory per rank: about ``1/n`` of the decoder's activations plus ``2p`` halo rows per
convolution, the whole latent-resolution tensor inside an attention block, and the whole
decoded output at the end (every rank receives it). The copy shares the original's parameters
and buffers (no second set of weights); only the module tree is new.
"""
