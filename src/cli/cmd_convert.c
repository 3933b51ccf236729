/* caldrix convert HFDIR OUT.gguf [--type F32|F16|BF16|Q8_0]: a Hugging Face checkpoint to a GGUF
 * laid out as llama.cpp's convert_hf_to_gguf.py lays it out (the model layer's cdx_convert_hf),
 * with the tokenizer keys it writes (the text layer's cdx_tok_export_gguf). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* %s: the architectures it converts (cdx_convert_archs, from the family rows) */
static const char k_convert_usage[] =
    "usage: caldrix convert HFDIR OUT.gguf [--type F32|F16|BF16|Q8_0] [--name NAME] [--vocab-only]\n"
    "                       [--task rerank [--yes-id N --no-id N]]\n"
    "       caldrix convert HFDIR OUTDIR --merge-lora ADAPTER[:SCALE]\n"
    "\n"
    "--merge-lora writes OUTDIR as a checkpoint (model.safetensors + HFDIR's config and tokenizer files)\n"
    "with the PEFT adapter merged as PEFT's merge_and_unload does: W += SCALE · alpha/r · B A (SCALE\n"
    "default 1), each tensor in its own type.\n\n"
    "Converts a Hugging Face checkpoint (config.json + safetensors; %s) to\n"
    "GGUF as llama.cpp's convert_hf_to_gguf.py does: its tensor names, the Llama q/k permutation,\n"
    "rope_freqs for Llama-3 scaling, its metadata keys and tokenizer keys.\n"
    "  --type T   type of the weight matrices (norms and vectors stay F32). Default: F16 when the\n"
    "             checkpoint is F16, BF16 when it is BF16, else F16 (llama.cpp's \"auto\").\n"
    "  --name N   general.name (default: the directory's name)\n"
    "  --vocab-only  write only general.architecture, general.name and the tokenizer keys (no\n"
    "             config.json or weights needed; the vocabulary is the tokenizer's own size)\n"
    "  --task rerank  write a Qwen3 reranker (Qwen3-Reranker) as llama.cpp's converter does: pooling_type 4\n"
    "             (rank), classifier.output_labels [\"yes\", \"no\"], the rerank chat template, and\n"
    "             cls.output.weight = the head's rows of \"yes\" and \"no\" (a plain causal LM on disk is\n"
    "             never taken for a reranker by its name; llama.cpp guesses from the name or README)\n"
    "  --yes-id N, --no-id N  the answer token ids (default: the tokenizer's \"yes\" and \"no\")\n"
    "A folder with modules.json (an embedding model: Qwen3-Embedding) gets its pooling_type from 1_Pooling\n"
    "(mean 1, cls 2, lasttoken 3) and caldrix.embedding.normalize where Normalize is listed.\n"
    "Without tokenizer files a placeholder vocabulary sized to the model is written.\n"
    "OUT must not be a file of HFDIR (nor a hard link to one), and OUT's folder must exist and be\n"
    "writable: otherwise caldrix convert refuses before any work (exit 2).\n";

static void usage(FILE *f)
{
    char archs[512]; /* 242 characters of titles with Granite MoE; room for more families */
    cdx_convert_archs(archs, sizeof archs);
    fprintf(f, k_convert_usage, archs);
}

/* llama.cpp's fingerprint of a BPE tokenizer: sha256 of Python's str() of encode(chktxt) with
 * add_special_tokens. The BOS/EOS the tokenizer adds are placed around an add_special=false
 * encoding (the same ids for the BOS/EOS templates of these families). */
static int pre_hash(const cdx_tok *tok, char hex[65])
{
    size_t tl, n = 0;
    const char *txt = cdx_tok_pre_check_text(&tl);
    cdx_err err = {0};
    if (cdx_tok_encode(tok, txt, tl, false, true, NULL, 0, &n, &err) && !n)
        return -1;
    int32_t *ids = malloc((n + 2) * sizeof *ids);
    size_t k = 0;
    if (!ids)
        return -1;
    if (cdx_tok_add_bos(tok) && cdx_tok_bos(tok) >= 0)
        ids[k++] = cdx_tok_bos(tok);
    if (cdx_tok_encode(tok, txt, tl, false, true, ids + k, n, &n, &err)) {
        free(ids);
        return -1;
    }
    n += k;
    if (cdx_tok_add_eos(tok) && cdx_tok_eos(tok) >= 0)
        ids[n++] = cdx_tok_eos(tok);
    cdx_sha256 s;
    if (cdx_sha256_init(&s) < 0) {
        uint8_t d[32];
        cdx_sha256_final(&s, d);
        free(ids);
        return -1;
    }
    cdx_sha256_update(&s, "[", 1);
    for (size_t i = 0; i < n; i++) {
        char b[24];
        int k = snprintf(b, sizeof b, "%s%d", i ? ", " : "", ids[i]);
        cdx_sha256_update(&s, b, (size_t)k);
    }
    cdx_sha256_update(&s, "]", 1);
    uint8_t d[32];
    if (cdx_sha256_final(&s, d) < 0) {
        free(ids);
        return -1;
    }
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    free(ids);
    return 0;
}

static bool has_file(const char *dir, const char *f)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, f);
    return stat(p, &st) == 0;
}

int cmd_convert(int argc, char **argv)
{
    const char *pos[2] = { 0 }, *type_name = NULL, *name = NULL, *merge = NULL;
    int n_pos = 0;
    bool vocab_only = false, rerank = false;
    long yes_id = -1, no_id = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--type") || !strcmp(argv[i], "--outtype") || !strcmp(argv[i], "--name")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "caldrix convert: %s needs a value (caldrix convert --help)\n", argv[i]);
                return 2;
            }
            *(!strcmp(argv[i], "--name") ? &name : &type_name) = argv[i + 1];
            i++;
        } else if (!strcmp(argv[i], "--merge-lora") && i + 1 < argc) {
            merge = argv[++i];
        } else if (!strcmp(argv[i], "--vocab-only")) {
            vocab_only = true;
        } else if (!strcmp(argv[i], "--task") || !strcmp(argv[i], "--yes-id") || !strcmp(argv[i], "--no-id")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "caldrix convert: %s needs a value (caldrix convert --help)\n", argv[i]);
                return 2;
            }
            if (!strcmp(argv[i], "--task")) {
                if (strcmp(argv[i + 1], "rerank")) {
                    fprintf(stderr, "caldrix convert: --task is \"%s\"; expected rerank (an embedding model's task "
                                    "comes from its modules.json)\n", argv[i + 1]);
                    return 2;
                }
                rerank = true;
            } else if (cli_parse_int(argv[i], argv[i + 1], 0, INT32_MAX, !strcmp(argv[i], "--yes-id") ? &yes_id : &no_id))
                return 2;
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "caldrix convert: unknown option \"%s\" (caldrix convert --help)\n", argv[i]);
            return 2;
        } else if (n_pos < 2) {
            pos[n_pos++] = argv[i];
        } else {
            fprintf(stderr, "caldrix convert: too many arguments (caldrix convert --help)\n");
            return 2;
        }
    }
    if (n_pos != 2) {
        usage(stderr);
        return 2;
    }
    const char *dir = pos[0], *out = pos[1];
    if (merge) {
        if (type_name || name || vocab_only) {
            fprintf(stderr, "caldrix convert: --merge-lora writes a checkpoint; --type, --name and --vocab-only are "
                            "for GGUF output\n");
            return 2;
        }
        char adir[4096];
        double scale = 1.0;
        snprintf(adir, sizeof adir, "%s", merge);
        char *colon = strrchr(adir, ':');
        struct stat as;
        if (colon && stat(adir, &as) != 0) {
            *colon = 0;
            if (cli_parse_float("--merge-lora SCALE", colon + 1, -1e6, 1e6, &scale))
                return 2;
        }
        cdx_err err = { 0 };
        int rc = cdx_lora_merge_checkpoint(dir, adir, (float)scale, out, &err);
        if (rc) {
            fprintf(stderr, "caldrix convert: %s\n", err.msg);
            return rc == CDX_EINVAL || rc == CDX_EUNSUPPORTED || rc == CDX_EFORMAT ? 2 : 1;
        }
        fprintf(stderr, "caldrix convert: wrote %s (%s merged into %s)\n", out, adir, dir);
        return 0;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "caldrix convert: %s is not a checkpoint directory\n", dir);
        return 1;
    }
    int crc = cli_check_output("convert", dir, out);
    if (crc)
        return crc;
    int type = -1;
    if (type_name) {
        static const char *const k_ok[] = { "F32", "F16", "BF16", "Q8_0" };
        for (size_t i = 0; i < 4; i++)
            if (!strcasecmp(type_name, k_ok[i]))
                type = cdx_type_from_name(k_ok[i]);
        if (type < 0) {
            fprintf(stderr, "caldrix convert: --type is \"%s\"; expected F32, F16, BF16 or Q8_0\n", type_name);
            return 2;
        }
    }
    cdx_err err = {0};
    cdx_gguf_writer *w = NULL;
    cdx_convert *c = NULL;
    cdx_tok *tok = NULL;
    int status = 1;
    if (vocab_only) {
        char hex[65] = "";
        cdx_tok_export_info info;
        if (cdx_gguf_writer_new(&w, &err)) {
            fprintf(stderr, "caldrix: %s\n", err.msg);
            goto done;
        }
        cdx_gguf_writer_set_str(w, "general.architecture", "llama");
        cdx_gguf_writer_set_str(w, "general.type", "vocab");
        cdx_gguf_writer_set_str(w, "general.name", name ? name : dir);
        if (!has_file(dir, "tokenizer.model") && !cdx_tok_open_dir(dir, &tok, &err) && pre_hash(tok, hex))
            hex[0] = 0;
        cdx_tok_export_opts to = { .pre_hash = hex[0] ? hex : NULL, .bos_id = -1, .eos_id = -1, .pad_id = -1 };
        if (err.code || cdx_tok_export_gguf(dir, tok, &to, w, &info, &err) || cdx_gguf_writer_write(w, out, &err)) {
            fprintf(stderr, "caldrix: %s\n", err.msg);
            goto done;
        }
        fprintf(stderr, "caldrix convert: wrote %s: tokenizer \"%s\", pre-tokenizer \"%s\" (from %s)\n", out, info.model,
                info.pre, info.pre_source);
        status = 0;
        goto done;
    }
    if ((yes_id >= 0 || no_id >= 0) && !rerank) {
        fprintf(stderr, "caldrix convert: --yes-id/--no-id are for --task rerank\n");
        return 2;
    }
    if ((yes_id < 0) != (no_id < 0)) {
        fprintf(stderr, "caldrix convert: give both --yes-id and --no-id, or neither\n");
        return 2;
    }
    if (rerank && yes_id < 0) { /* Qwen3Model._find_rerank_config: tokenizer.convert_tokens_to_ids("yes"/"no") */
        int32_t y = -1, n = -1;
        if (cdx_tok_open_dir(dir, &tok, &err) == 0) {
            y = cdx_tok_find(tok, "yes", 3);
            n = cdx_tok_find(tok, "no", 2);
        }
        cdx_tok_close(tok);
        tok = NULL;
        if (y < 0 || n < 0) {
            fprintf(stderr, "caldrix convert: --task rerank: %s has no tokenizer with the tokens \"yes\" and \"no\"%s%s; "
                            "give --yes-id N --no-id N\n", dir, err.code ? ": " : "", err.code ? err.msg : "");
            goto done;
        }
        yes_id = y;
        no_id = n;
        err = (cdx_err){ 0 };
    }
    if (type < 0) {
        /* llama.cpp's "auto": the dtype of the first 2-D tensor, F16 unless it is BF16/F16 */
        cdx_safetensors *sf = NULL;
        type = CDX_TYPE_F16;
        if (cdx_st_open(dir, &sf, &err) == 0) {
            for (uint64_t i = 0; i < sf->n_tensors; i++)
                if (sf->tensors[i].n_dims >= 2) {
                    if (sf->tensors[i].type == CDX_TYPE_BF16)
                        type = CDX_TYPE_BF16;
                    break;
                }
            cdx_st_close(sf);
        }
        err = (cdx_err){0};
    }
    if (cdx_gguf_writer_new(&w, &err) ||
        cdx_convert_hf(dir, &(cdx_convert_opts){ .type = (uint32_t)type, .name = name, .rerank = rerank,
                                                 .yes_id = (int32_t)yes_id, .no_id = (int32_t)no_id }, w, &c, &err)) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        goto done;
    }
    const cdx_hf_config *cfg = cdx_convert_config(c);
    const char *notes = cdx_convert_notes(c);
    if (*notes)
        fprintf(stderr, "caldrix convert: note: %s", notes);
    bool have_tok = has_file(dir, "tokenizer.json") || has_file(dir, "tokenizer.model") ||
                    (has_file(dir, "vocab.json") && has_file(dir, "merges.txt"));
    if (have_tok) {
        char hex[65] = "";
        bool spm = has_file(dir, "tokenizer.model");
        if (!spm) {
            if (cdx_tok_open_dir(dir, &tok, &err)) {
                fprintf(stderr, "caldrix: %s\n", err.msg);
                goto done;
            }
            if (pre_hash(tok, hex))
                hex[0] = 0;
        }
        cdx_tok_export_opts to = { .n_vocab = (uint32_t)cfg->vocab_size, .pre_hash = hex[0] ? hex : NULL,
                                   .bos_id = cfg->bos_token_id, .eos_id = cfg->n_eos ? cfg->eos_token_ids[0] : -1,
                                   .pad_id = cfg->pad_token_id };
        cdx_tok_export_info info;
        if (cdx_tok_export_gguf(dir, tok, &to, w, &info, &err)) {
            fprintf(stderr, "caldrix: %s\n", err.msg);
            goto done;
        }
        fprintf(stderr, "caldrix convert: tokenizer \"%s\", pre-tokenizer \"%s\" (from %s)\n", info.model, info.pre,
                info.pre_source);
    } else {
        fprintf(stderr, "caldrix convert: %s has no tokenizer files; writing a placeholder vocabulary of %lld tokens "
                "(<unk>, <s>, </s>, byte tokens, <tN>) so that llama.cpp can load the file\n", dir,
                (long long)cfg->vocab_size);
        if (cdx_tok_export_gguf_dummy(w, (uint32_t)cfg->vocab_size, cfg->bos_token_id,
                                      cfg->n_eos ? cfg->eos_token_ids[0] : -1, &err)) {
            fprintf(stderr, "caldrix: %s\n", err.msg);
            goto done;
        }
    }
    if (cdx_gguf_writer_write(w, out, &err)) {
        fprintf(stderr, "caldrix: %s\n", err.msg);
        goto done;
    }
    size_t nt, nb;
    cdx_convert_totals(c, &nt, &nb);
    char bb[32];
    cdx_fmt_bytes((uint64_t)nb, bb, sizeof bb);
    fprintf(stderr, "caldrix convert: wrote %s (%s): %zu tensors, %s\n", out, cdx_type_name((uint32_t)type), nt, bb);
    status = 0;
done:
    cdx_tok_close(tok);
    cdx_convert_free(c);
    cdx_gguf_writer_free(w);
    return status;
}
