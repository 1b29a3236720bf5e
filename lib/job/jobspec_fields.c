/* jobspec_fields.c — the table of job-file keys and the checks that need only
 * one key's value. Ranges keep every size inside int arithmetic downstream
 * (4 * d_model, dp * tp * pp, bucket_mb << 20). */
#include "lib/job/jobspec_fields.h"
#include "lib/util/suggest.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util/errline.h"
#include "lib/util/range.h"

const char *const job_section_names[SEC_COUNT] = {
    "model", "data", "train", "parallel", "checkpoint", "log", "launch", "model.moe", "model.mla", "train.lora",
};

static const char *const model_kinds[] = {"gpt", "vit", "llama", NULL};
static const char *const model_kind_aliases[] = {"gpt2,llm,lm,transformer", "vision,image",
                                                 "llama2,llama3,mistral,qwen2,smollm,decoder,rope", NULL};
static const char *const activations[] = {"gelu_tanh", "gelu", NULL};
static const char *const activation_aliases[] = {"gelu_new,gelu_pytorch_tanh,tanh,approximate,gelu_approx",
                                                 "gelu_erf,erf,exact,gelu_exact", NULL};
static const char *const attentions[] = {"fused", "naive", NULL};
static const char *const attention_aliases[] = {"flash,flash_attention,flash_attn,sdpa,online_softmax,memory_efficient",
                                                "eager,math,materialized,materialised,standard,vanilla,unfused", NULL};
static const char *const routers[] = {"softmax", "sigmoid", NULL};
static const char *const router_aliases[] = {"softmax_topk,topk_softmax,mixtral,switch,gshard",
                                             "sigmoid_topk,deepseek,deepseek_v3,noaux_tc", NULL};
static const char *const data_kinds[] = {"synthetic", "text", "tokens", "idx", "sft", NULL};
static const char *const data_kind_aliases[] = {"random,fake,dummy,synth", "txt,bytes,file",
                                                "bin,llmc,token,shards", "mnist,fashion_mnist,fmnist",
                                                "instruct,instruction,chat,finetune,fine_tune,sft_shards,packed",
                                                NULL};
static const char *const long_samples[] = {"refuse", "truncate", NULL};
static const char *const long_samples_aliases[] = {"error,fail,reject,strict,drop", "truncation,cut,clip,trim",
                                                   NULL};
static const char *const schedules[] = {"cosine", "linear", "constant", NULL};
static const char *const schedule_aliases[] = {"cos", "lin", "const,none,fixed", NULL};
static const char *const precisions[] = {"fp32", "bf16", NULL};
static const char *const precision_aliases[] = {"float32,float,f32,tf32", "bfloat16,fp16,float16,half", NULL};
static const char *const dtypes[] = {"auto", "fp32", "bf16", NULL};
static const char *const dtype_aliases[] = {"default", "float32,float,f32", "bfloat16", NULL};
static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
static const char *const device_aliases[] = {"default,any", "host", "gpu,nvidia", NULL};
static const char *const recomputes[] = {"none", "block", "selective", "elementwise", NULL};
static const char *const recompute_aliases[] = {"off,false,no", "full,true,on,yes", "attention,attn,core_attn",
                                                "norms,layernorm,light", NULL};
/* Plain data parallel is "ddp" everywhere dtrun prints it; "none" (its name
 * before) stays an alias, so old job files and checkpoints read the same. */
static const char *const shard_modes[] = {"ddp", "zero1", "zero2", "fsdp", "hsdp", NULL};
static const char *const shard_mode_former[] = {"none", "", "", "", "", NULL};
static const char *const shard_mode_aliases[] = {"off,zero0,zero_0,no_shard", "zero_1,os", "zero_2,os_g",
                                                 "zero3,zero_3,full_shard", "hybrid,hybrid_shard", NULL};
static const char *const pp_schedules[] = {"gpipe", "1f1b", "interleaved", "zb-h1", NULL};
static const char *const pp_schedule_aliases[] = {"fill_drain,fthenb", "one_f_one_b,pipedream",
                                                  "interleaved_1f1b,virtual,interleave",
                                                  "zb_h1,zbh1,zero_bubble,zerobubble", NULL};
static const char *const cp_modes[] = {"ring", NULL};
static const char *const cp_mode_aliases[] = {"p2p,ring_attention,ring_attn", NULL};
static const char *const progress_modes[] = {"auto", "on", "off", NULL};
static const char *const offload_parts[] = {"optimizer", "params", "activations", NULL};
static const char *const offload_aliases[] = {"optim,optimizer_state,optimizer_states,adam", "parameters,param,weights",
                                              "acts,activation", NULL};
/* train.lora.targets: the linear layers by their role (Llama's q_proj ...
 * gate_proj, up_proj, down_proj; GPT's c_attn holds q, k and v, c_proj is
 * o, c_fc up and mlp.c_proj down) */
static const char *const lora_targets[] = {"q", "k", "v", "o", "gate", "up", "down", NULL};
static const char *const lora_target_aliases[] = {
    "q_proj,query,wq,c_attn,qkv", "k_proj,key,wk", "v_proj,value,wv", "o_proj,out_proj,wo,dense,proj,c_proj",
    "gate_proj,w1", "up_proj,w3,fc,c_fc,fc1", "down_proj,w2,fc2,mlp_proj", NULL};
const char *job_lora_target_name(int i) { return i >= 0 && i < LORA_N_TARGETS ? lora_targets[i] : NULL; }
static const char *const progress_aliases[] = {"default", "true,yes,always", "false,no,never", NULL};

#define OFF(member) offsetof(job_spec, member)
#define SZ(member) sizeof(((job_spec *)0)->member)
#define NOMAX HUGE_VAL

/* Numbers: [lo, hi]. */
#define NUM(sec, k, t, member, l, h, al) \
    {.section = sec, .key = k, .type = t, .offset = OFF(member), .lo = l, .hi = h, .aliases = al}
#define STR(sec, k, t, member, al) \
    {.section = sec, .key = k, .type = t, .offset = OFF(member), .size = SZ(member), .aliases = al}
#define ENUM(sec, k, member, nm, va, al)                                                   \
    {.section = sec, .key = k, .type = FT_ENUM, .offset = OFF(member), .names = nm,        \
     .value_aliases = va, .aliases = al}

const field_def job_fields[FID_COUNT] = {
    [FID_MODEL_KIND] = ENUM(SEC_MODEL, "kind", model.kind, model_kinds, model_kind_aliases,
                            "type,arch,architecture,model_type"),
    [FID_MODEL_PRESET] = STR(SEC_MODEL, "preset", FT_PRESET, model.preset, "name,model,config,size"),
    [FID_N_LAYER] = NUM(SEC_MODEL, "n_layer", FT_INT, model.n_layer, 1, 65536,
                        "n_layers,num_layers,layers,depth,num_hidden_layers"),
    [FID_N_HEAD] = NUM(SEC_MODEL, "n_head", FT_INT, model.n_head, 1, 65536,
                       "n_heads,num_heads,heads,num_attention_heads"),
    [FID_D_MODEL] = NUM(SEC_MODEL, "d_model", FT_INT, model.d_model, 1, 1 << 20,
                        "n_embd,hidden_size,hidden_dim,dim,embed_dim,width,d_hidden"),
    [FID_D_FF] = NUM(SEC_MODEL, "d_ff", FT_INT, model.d_ff, 1, 1 << 22,
                     "ffn_hidden_size,intermediate_size,mlp_dim,ffn_dim,d_mlp,d_inner"),
    [FID_VOCAB_SIZE] = NUM(SEC_MODEL, "vocab_size", FT_INT, model.vocab_size, 2, 1 << 24,
                           "vocab,n_vocab,padded_vocab_size"),
    [FID_SEQ_LEN] = NUM(SEC_MODEL, "seq_len", FT_INT, model.seq_len, 1, 1 << 24,
                        "block_size,context_length,max_seq_len,seq_length,sequence_length,n_ctx,"
                        "context,n_positions"),
    [FID_IMAGE_SIZE] = NUM(SEC_MODEL, "image_size", FT_INT, model.image_size, 1, 65536,
                           "img_size,resolution,image_res"),
    [FID_PATCH_SIZE] = NUM(SEC_MODEL, "patch_size", FT_INT, model.patch_size, 1, 65536, "patch"),
    [FID_CHANNELS] = NUM(SEC_MODEL, "channels", FT_INT, model.channels, 1, 1024,
                         "in_channels,in_chans,num_channels,n_channels"),
    [FID_N_CLASSES] = NUM(SEC_MODEL, "n_classes", FT_INT, model.n_classes, 2, 1 << 24,
                          "num_classes,classes,num_labels,n_labels"),
    [FID_ACTIVATION] = ENUM(SEC_MODEL, "activation", model.activation, activations, activation_aliases,
                            "hidden_act,activation_function,act,act_fn,gelu,nonlinearity"),
    [FID_NORM_EPS] = {.section = SEC_MODEL, .key = "norm_eps", .type = FT_DOUBLE, .offset = OFF(model.norm_eps),
                      .lo = 0, .lo_open = 1, .hi = 1, .aliases = "layer_norm_eps,layer_norm_epsilon,ln_eps,norm_epsilon,"
                                                                 "eps_norm"},
    [FID_ATTENTION] = ENUM(SEC_MODEL, "attention", model.attention, attentions, attention_aliases,
                           "attn_implementation,attention_impl,attn_impl,use_flash_attn,flash_attn,attention_kind"),
    [FID_INIT_FROM] = STR(SEC_MODEL, "init_from", FT_STR, model.init_from,
                          "pretrained,from_pretrained,load_from,pretrained_path,init,weights,"
                          "model_name_or_path"),
    [FID_HEAD_CHUNK_ROWS] = NUM(SEC_MODEL, "head_chunk_rows", FT_INT, model.head_chunk_rows, 0, 1 << 24,
                                "loss_chunk_size,logits_chunk_size,lm_head_chunk_size,head_chunk_size,"
                                "cross_entropy_chunk_size,head_chunk"),
    [FID_N_KV_HEAD] = NUM(SEC_MODEL, "n_kv_head", FT_INT, model.n_kv_head, 1, 65536,
                          "n_kv_heads,num_key_value_heads,num_kv_heads,kv_heads,num_query_groups,n_kv,"
                          "n_head_kv,kv_channels"),
    [FID_ROPE_THETA] = {.section = SEC_MODEL, .key = "rope_theta", .type = FT_DOUBLE,
                        .offset = OFF(model.rope_theta), .lo = 1, .hi = 1e12,
                        .aliases = "rope_base,rotary_base,rotary_emb_base,theta,rope_freq_base,base"},
    [FID_TIE_EMBEDDINGS] = NUM(SEC_MODEL, "tie_embeddings", FT_BOOL, model.tie_embeddings, 0, 1,
                               "tie_word_embeddings,tied_embeddings,tie_weights,share_embeddings,tied,"
                               "untie_embeddings_and_output_weights,weight_tying"),
    [FID_MAX_POSITIONS] = NUM(SEC_MODEL, "max_positions", FT_INT, model.max_positions, 1, 1 << 24,
                              "max_position_embeddings,max_seq_length,max_pos,rope_max_positions,"
                              "max_sequence_length"),

    [FID_DATA_KIND] = ENUM(SEC_DATA, "kind", data.kind, data_kinds, data_kind_aliases,
                           "type,format,source,dataset"),
    [FID_DATA_TRAIN] = STR(SEC_DATA, "train", FT_STR, data.train_path,
                           "train_path,train_data,path,train_file,train_images,file,data_path"),
    [FID_DATA_TRAIN_LABELS] = STR(SEC_DATA, "train_labels", FT_STR, data.train_labels,
                                  "labels,train_label,train_labels_path"),
    [FID_DATA_VAL] = STR(SEC_DATA, "val", FT_STR, data.val_path,
                         "val_path,valid,validation,eval,test,val_data,val_images,val_file"),
    [FID_DATA_VAL_LABELS] = STR(SEC_DATA, "val_labels", FT_STR, data.val_labels,
                                "test_labels,valid_labels,val_label"),
    [FID_VAL_FRACTION] = {.section = SEC_DATA, .key = "val_fraction", .type = FT_DOUBLE,
                          .offset = OFF(data.val_fraction), .lo = 0, .hi = 1, .hi_open = 1,
                          .aliases = "val_split,validation_split,val_ratio,split"},
    [FID_SYNTHETIC_SIZE] = NUM(SEC_DATA, "synthetic_size", FT_LONG, data.synthetic_size, 1, NOMAX,
                               "size,num_samples,n_samples,synthetic_samples"),
    [FID_LONG_SAMPLES] = ENUM(SEC_DATA, "long_samples", data.long_samples, long_samples, long_samples_aliases,
                              "truncate,truncation,max_length,overflow,too_long,long"),

    [FID_STEPS] = NUM(SEC_TRAIN, "steps", FT_INT, train.steps, 1, NOMAX,
                      "max_steps,train_steps,iters,max_iters,num_steps,iterations,total_steps,step"),
    [FID_GLOBAL_BATCH] = NUM(SEC_TRAIN, "global_batch", FT_INT, train.global_batch, 1, NOMAX,
                             "batch_size,global_batch_size,total_batch_size,batch"),
    [FID_MICRO_BATCH] = NUM(SEC_TRAIN, "micro_batch", FT_INT, train.micro_batch, 1, NOMAX,
                            "micro_batch_size,micro_bs,per_device_batch_size,mbs"),
    [FID_LR] = {.section = SEC_TRAIN, .key = "lr", .type = FT_DOUBLE, .offset = OFF(train.lr),
                .lo = 0, .lo_open = 1, .hi = NOMAX, .aliases = "learning_rate,max_lr,base_lr"},
    [FID_MIN_LR] = NUM(SEC_TRAIN, "min_lr", FT_DOUBLE, train.min_lr, 0, NOMAX, "lr_min,final_lr,end_lr"),
    [FID_WARMUP] = NUM(SEC_TRAIN, "warmup", FT_INT, train.warmup, 0, NOMAX,
                       "warmup_steps,warmup_iters,lr_warmup_steps,lr_warmup_iters"),
    [FID_SCHEDULE] = ENUM(SEC_TRAIN, "schedule", train.schedule, schedules, schedule_aliases,
                          "lr_schedule,scheduler,lr_decay_style,decay,lr_scheduler"),
    [FID_WEIGHT_DECAY] = NUM(SEC_TRAIN, "weight_decay", FT_DOUBLE, train.weight_decay, 0, NOMAX, "wd"),
    [FID_BETA1] = {.section = SEC_TRAIN, .key = "beta1", .type = FT_DOUBLE, .offset = OFF(train.beta1),
                   .lo = 0, .hi = 1, .hi_open = 1, .aliases = "adam_beta1"},
    [FID_BETA2] = {.section = SEC_TRAIN, .key = "beta2", .type = FT_DOUBLE, .offset = OFF(train.beta2),
                   .lo = 0, .hi = 1, .hi_open = 1, .aliases = "adam_beta2"},
    [FID_EPS] = {.section = SEC_TRAIN, .key = "eps", .type = FT_DOUBLE, .offset = OFF(train.eps),
                 .lo = 0, .lo_open = 1, .hi = NOMAX, .aliases = "epsilon,adam_eps,adam_epsilon"},
    [FID_GRAD_CLIP] = NUM(SEC_TRAIN, "grad_clip", FT_DOUBLE, train.grad_clip, 0, NOMAX,
                          "clip_grad,max_grad_norm,gradient_clipping,clip_grad_norm,clip"),
    [FID_PRECISION] = ENUM(SEC_TRAIN, "precision", train.precision, precisions, precision_aliases,
                           "dtype,mixed_precision,amp,bf16"),
    [FID_GRAD_DTYPE] = ENUM(SEC_TRAIN, "grad_dtype", train.grad_dtype, dtypes, dtype_aliases,
                            "grad_accum_dtype,main_grads_dtype,accumulate_grads_in_fp32"),
    [FID_DEVICE] = ENUM(SEC_TRAIN, "device", train.device, devices, device_aliases,
                        "accelerator,device_type,devices"),
    [FID_SEED] = NUM(SEC_TRAIN, "seed", FT_U64, train.seed, 0, NOMAX, "random_seed,rng_seed"),
    [FID_RECOMPUTE] = ENUM(SEC_TRAIN, "recompute", train.recompute, recomputes, recompute_aliases,
                           "activation_checkpointing,gradient_checkpointing,checkpoint_activations,"
                           "recompute_granularity,remat"),
    [FID_EVAL_EVERY] = NUM(SEC_TRAIN, "eval_every", FT_INT, train.eval_every, 0, NOMAX,
                           "eval_interval,val_every,val_interval,eval_steps"),
    [FID_EVAL_BATCHES] = NUM(SEC_TRAIN, "eval_batches", FT_INT, train.eval_batches, 0, NOMAX,
                             "eval_iters,val_batches,val_steps,val_iters"),
    [FID_THREADS] = NUM(SEC_TRAIN, "threads", FT_INT, train.threads, 0, 65536,
                        "num_threads,omp_threads,n_threads"),
    [FID_SKIP_NONFINITE] = NUM(SEC_TRAIN, "skip_nonfinite", FT_BOOL, train.skip_nonfinite, 0, 1,
                               "skip_nan,skip_inf,skip_non_finite"),
    [FID_OFFLOAD] = {.section = SEC_TRAIN, .key = "offload", .type = FT_FLAGS, .offset = OFF(train.offload),
                     .names = offload_parts, .value_aliases = offload_aliases,
                     .aliases = "cpu_offload,offload_optimizer,zero_offload,offload_param"},
    [FID_CUDA_GRAPHS] = NUM(SEC_TRAIN, "cuda_graphs", FT_BOOL, train.cuda_graphs, 0, 1,
                            "cuda_graph,enable_cuda_graph,use_cuda_graph,external_cuda_graph,cudagraphs"),
    /* train.lora's keys, a mapping inside train: `lora: {rank: 8, ...}` (jobspec_lora.c) */
    [FID_LORA_RANK] = NUM(SEC_LORA, "rank", FT_INT, model.lora.rank, 1, 65536, "r,lora_r,lora_rank,dim"),
    [FID_LORA_ALPHA] = {.section = SEC_LORA, .key = "alpha", .type = FT_DOUBLE, .offset = OFF(model.lora.alpha),
                        .lo = 0, .lo_open = 1, .hi = NOMAX, .aliases = "lora_alpha,scale"},
    [FID_LORA_DROPOUT] = {.section = SEC_LORA, .key = "dropout", .type = FT_DOUBLE,
                          .offset = OFF(model.lora.dropout), .lo = 0, .hi = 1, .hi_open = 1,
                          .aliases = "lora_dropout,p"},
    [FID_LORA_TARGETS] = {.section = SEC_LORA, .key = "targets", .type = FT_FLAGS,
                          .offset = OFF(model.lora.targets), .names = lora_targets,
                          .value_aliases = lora_target_aliases, .aliases = "target_modules,modules,target"},
    [FID_LORA_INIT_FROM] = STR(SEC_LORA, "init_from", FT_STR, model.lora.init_from,
                               "adapter,from_pretrained,path,load,peft"),

    [FID_DP] = NUM(SEC_PARALLEL, "dp", FT_INT, parallel.dp, 1, 65536,
                   "data_parallel,data_parallel_size,dp_size"),
    [FID_TP] = NUM(SEC_PARALLEL, "tp", FT_INT, parallel.tp, 1, 65536,
                   "tensor_parallel,tensor_model_parallel_size,tensor_parallel_size,tp_size"),
    [FID_PP] = NUM(SEC_PARALLEL, "pp", FT_INT, parallel.pp, 1, 65536,
                   "pipeline_parallel,pipeline_model_parallel_size,pipeline_parallel_size,pp_size"),
    [FID_MODE] = {.section = SEC_PARALLEL, .key = "mode", .type = FT_ENUM, .offset = OFF(parallel.mode),
                  .names = shard_modes, .value_aliases = shard_mode_aliases, .value_former = shard_mode_former,
                  .aliases = "sharding,shard,zero,zero_stage,strategy,sharding_strategy"},
    [FID_PP_SCHEDULE] = ENUM(SEC_PARALLEL, "pp_schedule", parallel.pp_schedule, pp_schedules,
                             pp_schedule_aliases, "schedule,pipeline_schedule"),
    [FID_MICROBATCHES] = NUM(SEC_PARALLEL, "microbatches", FT_INT, parallel.microbatches, 1, NOMAX,
                             "num_microbatches,n_microbatches,chunks,micro_batches"),
    [FID_VIRTUAL_STAGES] = NUM(SEC_PARALLEL, "virtual_stages", FT_INT, parallel.virtual_stages, 1, 65536,
                               "virtual_pipeline_model_parallel_size,num_model_chunks,vpp"),
    [FID_SEQUENCE_PARALLEL] = NUM(SEC_PARALLEL, "sequence_parallel", FT_BOOL, parallel.sequence_parallel,
                                  0, 1, "sp,seq_parallel"),
    [FID_TP_OVERLAP] = NUM(SEC_PARALLEL, "tp_overlap", FT_BOOL, parallel.tp_overlap, 0, 1,
                           "tp_comm_overlap,overlap_tp_comm"),
    [FID_TP_SPLIT] = NUM(SEC_PARALLEL, "tp_split", FT_INT, parallel.tp_split, 1, 64,
                         "tp_comm_split,tp_comm_splits,tp_overlap_splits"),
    [FID_CP] = NUM(SEC_PARALLEL, "cp", FT_INT, parallel.cp, 1, 65536,
                   "context_parallel,context_parallel_size,cp_size,context_parallel_degree"),
    [FID_CP_MODE] = ENUM(SEC_PARALLEL, "cp_mode", parallel.cp_mode, cp_modes, cp_mode_aliases,
                         "cp_comm_type,context_parallel_mode,rotate_method"),
    [FID_EP] = NUM(SEC_PARALLEL, "ep", FT_INT, parallel.ep, 1, 65536,
                   "expert_parallel,expert_model_parallel_size,expert_parallel_size,ep_size,expert_parallel_degree,"
                   "moe_expert_parallel_size"),
    [FID_BUCKET_MB] = NUM(SEC_PARALLEL, "bucket_mb", FT_INT, parallel.bucket_mb, 1, 4096,
                          "bucket_size,bucket_cap_mb,bucket_size_mb"),

    [FID_REDUCE_DTYPE] = ENUM(SEC_PARALLEL, "reduce_dtype", parallel.reduce_dtype, dtypes, dtype_aliases,
                              "grad_reduce_dtype,reduce_in_fp32,allreduce_dtype,comm_dtype"),

    [FID_CKPT_DIR] = STR(SEC_CHECKPOINT, "dir", FT_STR, checkpoint.dir,
                         "path,save_dir,directory,save,ckpt_dir,output_dir"),
    [FID_CKPT_EVERY] = NUM(SEC_CHECKPOINT, "every", FT_INT, checkpoint.every, 0, NOMAX,
                           "save_every,interval,save_interval,save_steps"),
    [FID_CKPT_KEEP] = NUM(SEC_CHECKPOINT, "keep", FT_INT, checkpoint.keep, 1, NOMAX,
                          "keep_last,max_keep,save_total_limit"),
    [FID_CKPT_RESUME] = STR(SEC_CHECKPOINT, "resume", FT_RESUME, checkpoint.resume,
                            "load,resume_from,resume_from_checkpoint"),
    [FID_CKPT_ALLOW_CHANGES] = STR(SEC_CHECKPOINT, "allow_changes", FT_KEYS, checkpoint.allow_changes,
                                   "allow_change,allowed_changes,override,overrides,exclude_from_loading,"
                                   "override_opt_param_scheduler"),

    [FID_LOG_METRICS] = STR(SEC_LOG, "metrics", FT_STR, log.metrics, "metrics_file,jsonl,log_file,file"),
    [FID_LOG_EVERY] = NUM(SEC_LOG, "every", FT_INT, log.every, 1, NOMAX,
                          "log_every,interval,log_interval,log_steps"),
    [FID_LOG_PROGRESS] = ENUM(SEC_LOG, "progress", log.progress, progress_modes, progress_aliases,
                              "progress_bar,bar"),
    [FID_LOG_TRACE] = STR(SEC_LOG, "trace", FT_STR, log.trace, "trace_file,profile,chrome_trace"),
    [FID_LOG_TENSORBOARD] = STR(SEC_LOG, "tensorboard", FT_STR, log.tensorboard,
                                "tensorboard_dir,tb,tb_dir,summary_dir"),

    [FID_NPROC_PER_NODE] = STR(SEC_LAUNCH, "nproc_per_node", FT_NPROC, launch.nproc_per_node,
                               "nproc,nprocs,gpus,gpus_per_node,ntasks_per_node"),
    [FID_NNODES] = STR(SEC_LAUNCH, "nnodes", FT_NNODES, launch.nnodes, "nodes,num_nodes,n_nodes"),
    [FID_RDZV_ENDPOINT] = STR(SEC_LAUNCH, "rdzv_endpoint", FT_ENDPOINT, launch.rdzv_endpoint,
                              "endpoint,master_addr,rendezvous,rdzv_addr,master"),
    [FID_RDZV_ID] = STR(SEC_LAUNCH, "rdzv_id", FT_STR, launch.rdzv_id, "job_id,run_id,rendezvous_id"),
    [FID_MAX_RESTARTS] = NUM(SEC_LAUNCH, "max_restarts", FT_INT, launch.max_restarts, 0, NOMAX,
                             "restarts,retries,max_retries"),
    [FID_LOG_DIR] = STR(SEC_LAUNCH, "log_dir", FT_STR, launch.log_dir, "logs,logdir,log_path"),

    [FID_MOE_EXPERTS] = NUM(SEC_MOE, "experts", FT_INT, model.moe.experts, 1, 65536,
                            "num_experts,num_local_experts,n_routed_experts,n_experts,moe_num_experts,"
                            "num_routed_experts"),
    [FID_MOE_TOP_K] = NUM(SEC_MOE, "top_k", FT_INT, model.moe.top_k, 1, 64,
                          "num_experts_per_tok,moe_router_topk,topk,k,n_experts_per_tok,experts_per_token"),
    [FID_MOE_D_FF_EXPERT] = NUM(SEC_MOE, "d_ff_expert", FT_INT, model.moe.d_ff_expert, 1, 1 << 22,
                                "moe_intermediate_size,moe_ffn_hidden_size,expert_ffn_hidden_size,d_expert,"
                                "intermediate_size,d_ff"),
    [FID_MOE_SHARED_EXPERTS] = NUM(SEC_MOE, "shared_experts", FT_INT, model.moe.shared_experts, 0, 64,
                                   "n_shared_experts,num_shared_experts,moe_shared_experts,shared"),
    [FID_MOE_EVERY] = NUM(SEC_MOE, "every", FT_INT, model.moe.every, 1, 65536,
                          "moe_layer_freq,decoder_sparse_step,moe_every,interleave_moe_layer_step,expert_interval,"
                          "moe_frequency"),
    [FID_MOE_FIRST_DENSE] = NUM(SEC_MOE, "first_dense", FT_INT, model.moe.first_dense, 0, 65536,
                                "first_k_dense_replace,first_k_dense,n_dense_layers,dense_layers"),
    [FID_MOE_ROUTER] = ENUM(SEC_MOE, "router", model.moe.router, routers, router_aliases,
                            "scoring_func,moe_router_score_function,score_function,gate,router_kind,gating"),
    [FID_MOE_NORM_TOP_K] = NUM(SEC_MOE, "norm_top_k", FT_BOOL, model.moe.norm_top_k, 0, 1,
                               "norm_topk_prob,moe_router_topk_normalize,normalize_top_k,renormalize"),
    [FID_MOE_AUX_LOSS_COEF] = NUM(SEC_MOE, "aux_loss_coef", FT_DOUBLE, model.moe.aux_loss_coef, 0, NOMAX,
                                  "router_aux_loss_coef,moe_aux_loss_coeff,aux_loss_alpha,load_balancing_loss_coef,"
                                  "balance_loss_coef,aux_loss"),
    [FID_MOE_BIAS_UPDATE_RATE] = NUM(SEC_MOE, "bias_update_rate", FT_DOUBLE, model.moe.bias_update_rate, 0, NOMAX,
                                     "moe_router_bias_update_rate,bias_update_speed,gamma,expert_bias_rate"),
    [FID_MOE_CAPACITY_FACTOR] = NUM(SEC_MOE, "capacity_factor", FT_DOUBLE, model.moe.capacity_factor, 0, NOMAX,
                                    "moe_expert_capacity_factor,expert_capacity,capacity,train_capacity_factor"),
    [FID_MLA_Q_LORA_RANK] = NUM(SEC_MLA, "q_lora_rank", FT_INT, model.mla.q_lora_rank, 0, 1 << 20,
                                "q_lora,query_lora_rank,q_rank"),
    [FID_MLA_KV_LORA_RANK] = NUM(SEC_MLA, "kv_lora_rank", FT_INT, model.mla.kv_lora_rank, 1, 1 << 20,
                                 "kv_lora,kv_rank,latent_dim,kv_latent_dim"),
    [FID_MLA_QK_ROPE_HEAD_DIM] = NUM(SEC_MLA, "qk_rope_head_dim", FT_INT, model.mla.qk_rope_head_dim, 2, 1 << 16,
                                     "rope_head_dim,qk_rope_dim,rope_dim"),
    [FID_MLA_QK_NOPE_HEAD_DIM] = NUM(SEC_MLA, "qk_nope_head_dim", FT_INT, model.mla.qk_nope_head_dim, 1, 1 << 16,
                                     "nope_head_dim,qk_nope_dim,nope_dim"),
    [FID_MLA_V_HEAD_DIM] = NUM(SEC_MLA, "v_head_dim", FT_INT, model.mla.v_head_dim, 1, 1 << 16,
                               "value_head_dim,v_dim,head_dim_v"),
};

/* Kind-specific model keys, and "not set" launch keys: set apart from the
 * initialisers above to keep those rows short. */
static field_only field_only_of(int fid)
{
    switch (fid) {
    case FID_VOCAB_SIZE: case FID_SEQ_LEN: case FID_HEAD_CHUNK_ROWS: return ONLY_LM;
    case FID_MOE_EXPERTS: case FID_MOE_TOP_K: case FID_MOE_D_FF_EXPERT: case FID_MOE_SHARED_EXPERTS:
    case FID_MOE_EVERY: case FID_MOE_FIRST_DENSE: case FID_MOE_ROUTER: case FID_MOE_NORM_TOP_K:
    case FID_MOE_AUX_LOSS_COEF: case FID_MOE_BIAS_UPDATE_RATE: case FID_MOE_CAPACITY_FACTOR: return ONLY_LM;
    case FID_IMAGE_SIZE: case FID_PATCH_SIZE: case FID_CHANNELS: case FID_N_CLASSES: return ONLY_VIT;
    case FID_N_KV_HEAD: case FID_ROPE_THETA: case FID_TIE_EMBEDDINGS: case FID_MAX_POSITIONS: return ONLY_LLAMA;
    case FID_MLA_Q_LORA_RANK: case FID_MLA_KV_LORA_RANK: case FID_MLA_QK_ROPE_HEAD_DIM: case FID_MLA_QK_NOPE_HEAD_DIM:
    case FID_MLA_V_HEAD_DIM: return ONLY_LLAMA;
    case FID_ACTIVATION: return ONLY_GELU;
    case FID_LORA_RANK: case FID_LORA_ALPHA: case FID_LORA_DROPOUT: case FID_LORA_TARGETS: case FID_LORA_INIT_FROM:
        return ONLY_LM;
    default: return ONLY_ANY;
    }
}

const char *job_field_kinds_text(int fid)
{
    switch (field_only_of(fid)) {
    case ONLY_LM: return "gpt and llama";
    case ONLY_VIT: return "vit";
    case ONLY_LLAMA: return "llama";
    case ONLY_GELU: return "gpt and vit";
    default: return "every kind of";
    }
}

int job_field_find(job_section section, const char *key, size_t len)
{
    for (int f = 0; f < FID_COUNT; f++)
        if (job_fields[f].section == section && strlen(job_fields[f].key) == len &&
            !memcmp(job_fields[f].key, key, len))
            return f;
    return -1;
}

void job_field_full_name(int fid, char *out, size_t n)
{
    snprintf(out, n, "%s.%s", job_section_names[job_fields[fid].section], job_fields[fid].key);
}

int job_section_parent(int sec)
{
    return sec == SEC_MOE || sec == SEC_MLA ? SEC_MODEL : sec == SEC_LORA ? SEC_TRAIN : -1;
}
const char *job_section_key(int sec)
{
    return sec == SEC_MOE ? "moe" : sec == SEC_MLA ? "mla" : sec == SEC_LORA ? "lora" : job_section_names[sec];
}

int job_section_find(const char *name, size_t len)
{
    for (int s = 0; s < SEC_COUNT; s++)
        if (strlen(job_section_names[s]) == len && !memcmp(job_section_names[s], name, len)) return s;
    return -1;
}

void *job_field_ptr(job_spec *job, int fid)
{
    return (char *)job + job_fields[fid].offset;
}

const void *job_field_cptr(const job_spec *job, int fid)
{
    return (const char *)job + job_fields[fid].offset;
}

int job_field_applies(const job_spec *job, int fid)
{
    field_only only = field_only_of(fid);
    model_kind k = job->model.kind;
    switch (only) {
    case ONLY_LM: return k == MODEL_GPT || k == MODEL_LLAMA;
    case ONLY_VIT: return k == MODEL_VIT;
    case ONLY_LLAMA: return k == MODEL_LLAMA;
    case ONLY_GELU: return k == MODEL_GPT || k == MODEL_VIT;
    default: return 1;
    }
}

int job_field_unset(const job_spec *job, int fid)
{
    if (job_fields[fid].section == SEC_LORA) return !job_lora_on(&job->model); /* LoRA off */
    if (job_fields[fid].section != SEC_LAUNCH) return 0;
    if (job_fields[fid].type == FT_INT) return *(const int *)job_field_cptr(job, fid) == -1;
    return ((const char *)job_field_cptr(job, fid))[0] == 0;
}

void job_field_range_text(int fid, char *out, size_t n)
{
    const field_def *f = &job_fields[fid];
    if (f->hi == NOMAX)
        snprintf(out, n, "must be %s %.15g", f->lo_open ? ">" : ">=", f->lo);
    else
        snprintf(out, n, "must be %s %.15g and %s %.15g", f->lo_open ? ">" : ">=", f->lo,
                 f->hi_open ? "<" : "<=", f->hi);
}

int job_field_in_range(int fid, double v)
{
    const field_def *f = &job_fields[fid];
    if (f->lo_open ? !(v > f->lo) : !(v >= f->lo)) return -1;
    if (f->hi != NOMAX && (f->hi_open ? !(v < f->hi) : !(v <= f->hi))) return -1;
    return 0;
}

void job_field_enum_list(int fid, char *out, size_t n)
{
    const char *const *names = job_fields[fid].names;
    size_t used = 0;
    int count = 0;
    while (names[count]) count++;
    out[0] = 0;
    for (int i = 0; i < count && used < n; i++) {
        const char *sep = i == 0 ? "" : i == count - 1 ? " or " : ", ";
        int w = snprintf(out + used, n - used, "%s%s", sep, names[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* A decimal number in [1, max] made of digits only, else -1. */
static long small_count(const char *s, size_t len, long max)
{
    if (len == 0 || len > 9) return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v >= 1 && v <= max ? v : -1;
}

static int check_endpoint(const char *s, char *why, size_t n)
{
    const char *port = NULL;
    size_t host_len;
    if (s[0] == '[') { /* [IPv6]:port */
        const char *close = strchr(s, ']');
        if (!close || close == s + 1) {
            snprintf(why, n, "an IPv6 address must be written [ADDR] or [ADDR]:PORT");
            return -1;
        }
        host_len = (size_t)(close - s - 1);
        if (close[1] == ':') port = close + 2;
        else if (close[1] != 0) {
            snprintf(why, n, "expected HOST or HOST:PORT");
            return -1;
        }
    } else {
        const char *colon = strchr(s, ':');
        if (colon && strchr(colon + 1, ':')) {
            snprintf(why, n, "an IPv6 address must be written [ADDR] or [ADDR]:PORT");
            return -1;
        }
        host_len = colon ? (size_t)(colon - s) : strlen(s);
        if (colon) port = colon + 1;
    }
    if (host_len == 0) {
        snprintf(why, n, "the host is empty (expected HOST or HOST:PORT)");
        return -1;
    }
    for (const char *p = s; *p; p++)
        if (*p == ' ' || *p == '\t' || *p == '/') {
            snprintf(why, n, "expected HOST or HOST:PORT, without spaces or slashes");
            return -1;
        }
    if (port && small_count(port, strlen(port), 65535) < 0) {
        snprintf(why, n, "the port must be a number from 1 to 65535");
        return -1;
    }
    return 0;
}

int job_field_check_string(int fid, const char *s, char *why, size_t n)
{
    switch (job_fields[fid].type) {
    case FT_RESUME:
        if (s[0] == 0) {
            snprintf(why, n, "must be auto, never or a checkpoint path");
            return -1;
        }
        return 0;
    case FT_NPROC:
        if (s[0] == 0 || !strcmp(s, "cpu") || !strcmp(s, "gpu") || !strcmp(s, "auto")) return 0;
        if (small_count(s, strlen(s), 65536) > 0) return 0;
        snprintf(why, n, "expected a number of processes (1 to 65536), cpu, gpu or auto");
        return -1;
    case FT_NNODES: {
        if (s[0] == 0) return 0;
        int lo, hi;
        switch (range_parse(s, 1, 65536, &lo, &hi, NULL, 0)) {
        case RANGE_OK: return 0;
        case RANGE_MIN_OVER_MAX: return errline(why, n, "MIN is larger than MAX in MIN:MAX");
        default: return errline(why, n, "expected N or MIN:MAX nodes (1 to 65536)");
        }
    }
    case FT_ENDPOINT:
        return s[0] == 0 ? 0 : check_endpoint(s, why, n);
    case FT_KEYS:
        return job_key_list_check(s, why, n);
    default:
        return 0;
    }
}

/* ---- lists of keys (checkpoint.allow_changes, --allow-changes) ---- */

int job_list_next(const char **s, const char *end, const char **a, const char **b)
{
    while (*s < end) {
        const char *comma = memchr(*s, ',', (size_t)(end - *s)), *stop = comma ? comma : end;
        *a = *s;
        *b = stop;
        while (*a < *b && (**a == ' ' || **a == '\t')) (*a)++;
        while (*b > *a && ((*b)[-1] == ' ' || (*b)[-1] == '\t')) (*b)--;
        *s = comma ? comma + 1 : end;
        if (*a < *b) return 1;
    }
    return 0;
}

/* Calls fn on each name of a comma list; stops at the first non-zero answer
 * and returns it. */
static int each_listed(const char *list, int (*fn)(const char *name, size_t len, void *ctx), void *ctx)
{
    const char *s = list, *a, *b;
    while (job_list_next(&s, list + strlen(list), &a, &b)) {
        int rc = fn(a, (size_t)(b - a), ctx);
        if (rc) return rc;
    }
    return 0;
}

/* The field a "section.key" names, or -1. */
static int field_of_full_name(const char *name, size_t len)
{
    const char *dot = memrchr(name, '.', len); /* "model.moe.experts": the section is all before the last */
    if (!dot) return -1;
    int sec = job_section_find(name, (size_t)(dot - name));
    return sec < 0 ? -1 : job_field_find((job_section)sec, dot + 1, len - (size_t)(dot - name) - 1);
}

typedef struct {
    char *why;
    size_t n;
} list_check;

static int check_listed(const char *name, size_t len, void *ctx)
{
    list_check *c = ctx;
    if ((len == 3 && !memcmp(name, "all", 3)) || field_of_full_name(name, len) >= 0) return 0;
    suggest near;
    suggest_init(&near, name, len);
    char full[96], names[FID_COUNT][96]; /* suggest keeps a pointer to the best */
    for (int f = 0; f < FID_COUNT; f++) {
        job_field_full_name(f, names[f], sizeof names[f]);
        suggest_offer(&near, names[f], names[f]);
    }
    snprintf(full, sizeof full, "%.*s", (int)(len < 80 ? len : 80), name);
    if (suggest_best(&near))
        snprintf(c->why, c->n, "'%s' is not a job key (section.key, or all); did you mean '%s'?", full, suggest_best(&near));
    else
        snprintf(c->why, c->n, "'%s' is not a job key (section.key, e.g. train.lr, or all)", full);
    return -1;
}

int job_key_list_check(const char *list, char *why, size_t n)
{
    list_check c = {why, n};
    return each_listed(list, check_listed, &c);
}

typedef struct {
    const char *full;
} list_find;

static int find_listed(const char *name, size_t len, void *ctx)
{
    const list_find *f = ctx;
    return (len == 3 && !memcmp(name, "all", 3)) || (strlen(f->full) == len && !memcmp(name, f->full, len));
}

int job_key_list_has(const char *list, const char *full)
{
    list_find f = {full};
    return each_listed(list, find_listed, &f) > 0;
}

/* ---- enum names for the rest of the program (jobspec.h) ---- */

static const char *name_of(const char *const *names, int v)
{
    for (int i = 0; names[i]; i++)
        if (i == v) return names[i];
    return "?";
}

const char *job_model_kind_name(model_kind k) { return name_of(model_kinds, (int)k); }
const char *job_activation_name(activation_kind a) { return name_of(activations, (int)a); }
const char *job_attention_name(attention_kind a) { return name_of(attentions, (int)a); }
const char *job_router_name(router_kind r) { return name_of(routers, (int)r); }
double job_model_norm_eps(const job_model *m) { return m->norm_eps > 0 ? m->norm_eps : JOB_NORM_EPS_DEFAULT; }
int job_model_kv_heads(const job_model *m)
{
    return m->kind == MODEL_LLAMA && m->n_kv_head > 0 ? m->n_kv_head : m->n_head;
}
double job_model_rope_theta(const job_model *m) { return m->rope_theta > 0 ? m->rope_theta : JOB_ROPE_THETA_DEFAULT; }
int job_model_max_positions(const job_model *m)
{
    return m->kind == MODEL_LLAMA && m->max_positions > m->seq_len ? m->max_positions : m->seq_len;
}
int job_model_tied_head(const job_model *m) { return m->kind == MODEL_GPT || (m->kind == MODEL_LLAMA && m->tie_embeddings); }
const char *job_data_kind_name(data_kind k) { return name_of(data_kinds, (int)k); }
const char *job_long_samples_name(long_samples_kind k) { return name_of(long_samples, (int)k); }
const char *job_lr_schedule_name(lr_schedule s) { return name_of(schedules, (int)s); }
const char *job_precision_name(precision_kind p) { return name_of(precisions, (int)p); }
const char *job_dtype_name(dtype_kind d) { return name_of(dtypes, (int)d); }
const char *job_device_name(device_kind d) { return name_of(devices, (int)d); }
const char *job_recompute_name(recompute_kind r) { return name_of(recomputes, (int)r); }
const char *job_shard_mode_name(shard_mode m) { return name_of(shard_modes, (int)m); }
const char *job_pp_schedule_name(pp_schedule_kind s) { return name_of(pp_schedules, (int)s); }
const char *job_cp_mode_name(cp_mode_kind m) { return name_of(cp_modes, (int)m); }
const char *job_progress_name(progress_mode p) { return name_of(progress_modes, (int)p); }
