/* caldrix: a local LLM inference engine. The public C API, everything the CLI and the server use.
 *
 *   cdx_err err = {0};
 *   cdx_model *m = NULL;
 *   if (cdx_model_open("stories260K.gguf", NULL, &m, &err) < 0) fprintf(stderr, "%s\n", err.msg);
 *   ... create a session, feed tokens, sample ...
 *   cdx_model_close(m);
 *
 * Each layer has its own header under include/caldrix/; this one includes them all.
 */
#ifndef CALDRIX_H
#define CALDRIX_H

#include "caldrix/base.h"
#include "caldrix/pool.h"
#include "caldrix/quant.h"
#include "caldrix/format.h"
#include "caldrix/template.h"
#include "caldrix/config.h"
#include "caldrix/kernel.h"
#include "caldrix/model.h"
#include "caldrix/convert.h"
#include "caldrix/engine.h"
#include "caldrix/train.h"
#include "caldrix/tokenizer.h"
#include "caldrix/hub.h"
#include "caldrix/server.h"
#include "caldrix/image.h"
#include "caldrix/grammar.h"
#include "caldrix/load.h"
#include "caldrix/pipeline.h"
#include "caldrix/embed.h"

#endif
