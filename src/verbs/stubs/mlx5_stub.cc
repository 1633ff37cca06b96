// Stub libmlx5.so.1: every public symbol of rdma-core 44's libmlx5, with its exact prototype from
// <infiniband/mlx5dv.h> and its symbol version (libmlx5.map), answering "not supported".
// perftest and the pyverbs mlx5 modules link libmlx5.so.1 and resolve every import at load time
// (BIND_NOW), so each symbol must exist; softhca is not an mlx5 device (vendor id is not 0x02c9),
// so no program reaches these on its default paths (verbs-abi.md §1.3, §1.5).
// Conventions: see src/verbs/unsupported.h; mlx5dv_is_supported answers false.
#include <infiniband/mlx5dv.h>

#include <cerrno>
#include <cstdint>
#include <type_traits>

#include "verbs/unsupported.h"

using softhca::verbs::unsupported;

extern "C" {

// mlx5dv_init_obj has two versions, as in rdma-core: a MLX5_1.0 compatibility one and the
// default MLX5_1.2 one. Both are defined under private names and bound with .symver.
int softhca_mlx5dv_init_obj_1_0(mlx5dv_obj*, uint64_t) { return unsupported<int>(); }
int softhca_mlx5dv_init_obj_1_2(mlx5dv_obj*, uint64_t) { return unsupported<int>(); }
__asm__(".symver softhca_mlx5dv_init_obj_1_0, mlx5dv_init_obj@MLX5_1.0");
__asm__(".symver softhca_mlx5dv_init_obj_1_2, mlx5dv_init_obj@@MLX5_1.2");
static_assert(std::is_same_v<decltype(&softhca_mlx5dv_init_obj_1_2), decltype(&mlx5dv_init_obj)>);

// ---- MLX5_1.0 -------------------------------------------------------------------------
int mlx5dv_query_device(ibv_context*, mlx5dv_context*) { return unsupported<int>(); }

// ---- MLX5_1.1 -------------------------------------------------------------------------
ibv_cq_ex* mlx5dv_create_cq(ibv_context*, ibv_cq_init_attr_ex*, mlx5dv_cq_init_attr*) {
  return unsupported<ibv_cq_ex*>();
}

// ---- MLX5_1.2 -------------------------------------------------------------------------
int mlx5dv_set_context_attr(ibv_context*, mlx5dv_set_ctx_attr_type, void*) {
  return unsupported<int>();
}

// ---- MLX5_1.3 -------------------------------------------------------------------------
ibv_qp* mlx5dv_create_qp(ibv_context*, ibv_qp_init_attr_ex*, mlx5dv_qp_init_attr*) {
  return unsupported<ibv_qp*>();
}
ibv_wq* mlx5dv_create_wq(ibv_context*, ibv_wq_init_attr*, mlx5dv_wq_init_attr*) {
  return unsupported<ibv_wq*>();
}

// ---- MLX5_1.4 -------------------------------------------------------------------------
int mlx5dv_get_clock_info(ibv_context*, mlx5dv_clock_info*) { return unsupported<int>(); }

// ---- MLX5_1.5 -------------------------------------------------------------------------
ibv_flow_action* mlx5dv_create_flow_action_esp(ibv_context*, ibv_flow_action_esp_attr*,
                                               mlx5dv_flow_action_esp*) {
  return unsupported<ibv_flow_action*>();
}

// ---- MLX5_1.6 -------------------------------------------------------------------------
ibv_flow* mlx5dv_create_flow(mlx5dv_flow_matcher*, mlx5dv_flow_match_parameters*, size_t,
                             mlx5dv_flow_action_attr*) {
  return unsupported<ibv_flow*>();
}
mlx5dv_flow_matcher* mlx5dv_create_flow_matcher(ibv_context*, mlx5dv_flow_matcher_attr*) {
  return unsupported<mlx5dv_flow_matcher*>();
}
int mlx5dv_destroy_flow_matcher(mlx5dv_flow_matcher*) { return unsupported<int>(); }

// ---- MLX5_1.7 -------------------------------------------------------------------------
ibv_flow_action* mlx5dv_create_flow_action_modify_header(ibv_context*, size_t, uint64_t*,
                                                         mlx5_ib_uapi_flow_table_type) {
  return unsupported<ibv_flow_action*>();
}
ibv_flow_action* mlx5dv_create_flow_action_packet_reformat(
    ibv_context*, size_t, void*, mlx5_ib_uapi_flow_action_packet_reformat_type,
    mlx5_ib_uapi_flow_table_type) {
  return unsupported<ibv_flow_action*>();
}
mlx5dv_devx_uar* mlx5dv_devx_alloc_uar(ibv_context*, uint32_t) {
  return unsupported<mlx5dv_devx_uar*>();
}
void mlx5dv_devx_free_uar(mlx5dv_devx_uar*) { return unsupported<void>(); }
int mlx5dv_devx_general_cmd(ibv_context*, const void*, size_t, void*, size_t) {
  return unsupported<int>();
}
mlx5dv_devx_obj* mlx5dv_devx_obj_create(ibv_context*, const void*, size_t, void*, size_t) {
  return unsupported<mlx5dv_devx_obj*>();
}
int mlx5dv_devx_obj_destroy(mlx5dv_devx_obj*) { return unsupported<int>(); }
int mlx5dv_devx_obj_modify(mlx5dv_devx_obj*, const void*, size_t, void*, size_t) {
  return unsupported<int>();
}
int mlx5dv_devx_obj_query(mlx5dv_devx_obj*, const void*, size_t, void*, size_t) {
  return unsupported<int>();
}
int mlx5dv_devx_query_eqn(ibv_context*, uint32_t, uint32_t*) { return unsupported<int>(); }
int mlx5dv_devx_umem_dereg(mlx5dv_devx_umem*) { return unsupported<int>(); }
mlx5dv_devx_umem* mlx5dv_devx_umem_reg(ibv_context*, void*, size_t, uint32_t) {
  return unsupported<mlx5dv_devx_umem*>();
}
ibv_context* mlx5dv_open_device(ibv_device*, mlx5dv_context_attr*) {
  return unsupported<ibv_context*>();
}

// ---- MLX5_1.8 -------------------------------------------------------------------------
int mlx5dv_devx_cq_modify(ibv_cq*, const void*, size_t, void*, size_t) {
  return unsupported<int>();
}
int mlx5dv_devx_cq_query(ibv_cq*, const void*, size_t, void*, size_t) { return unsupported<int>(); }
int mlx5dv_devx_ind_tbl_modify(ibv_rwq_ind_table*, const void*, size_t, void*, size_t) {
  return unsupported<int>();
}
int mlx5dv_devx_ind_tbl_query(ibv_rwq_ind_table*, const void*, size_t, void*, size_t) {
  return unsupported<int>();
}
int mlx5dv_devx_qp_modify(ibv_qp*, const void*, size_t, void*, size_t) {
  return unsupported<int>();
}
int mlx5dv_devx_qp_query(ibv_qp*, const void*, size_t, void*, size_t) { return unsupported<int>(); }
int mlx5dv_devx_srq_modify(ibv_srq*, const void*, size_t, void*, size_t) {
  return unsupported<int>();
}
int mlx5dv_devx_srq_query(ibv_srq*, const void*, size_t, void*, size_t) {
  return unsupported<int>();
}
int mlx5dv_devx_wq_modify(ibv_wq*, const void*, size_t, void*, size_t) {
  return unsupported<int>();
}
int mlx5dv_devx_wq_query(ibv_wq*, const void*, size_t, void*, size_t) { return unsupported<int>(); }
bool mlx5dv_is_supported(ibv_device*) { return unsupported<bool>(); }

// ---- MLX5_1.9 -------------------------------------------------------------------------
mlx5dv_devx_cmd_comp* mlx5dv_devx_create_cmd_comp(ibv_context*) {
  return unsupported<mlx5dv_devx_cmd_comp*>();
}
void mlx5dv_devx_destroy_cmd_comp(mlx5dv_devx_cmd_comp*) { return unsupported<void>(); }
int mlx5dv_devx_get_async_cmd_comp(mlx5dv_devx_cmd_comp*, mlx5_ib_uapi_devx_async_cmd_hdr*,
                                   size_t) {
  return unsupported<int>();
}
int mlx5dv_devx_obj_query_async(mlx5dv_devx_obj*, const void*, size_t, size_t, uint64_t,
                                mlx5dv_devx_cmd_comp*) {
  return unsupported<int>();
}

// ---- MLX5_1.10 ------------------------------------------------------------------------
ibv_dm* mlx5dv_alloc_dm(ibv_context*, ibv_alloc_dm_attr*, mlx5dv_alloc_dm_attr*) {
  return unsupported<ibv_dm*>();
}
mlx5dv_mkey* mlx5dv_create_mkey(mlx5dv_mkey_init_attr*) { return unsupported<mlx5dv_mkey*>(); }
int mlx5dv_destroy_mkey(mlx5dv_mkey*) { return unsupported<int>(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_ibv_qp(ibv_qp*) {
  return unsupported<mlx5dv_dr_action*>();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_table(mlx5dv_dr_table*) {
  return unsupported<mlx5dv_dr_action*>();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_vport(mlx5dv_dr_domain*, uint32_t) {
  return unsupported<mlx5dv_dr_action*>();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_drop() { return unsupported<mlx5dv_dr_action*>(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_flow_counter(mlx5dv_devx_obj*, uint32_t) {
  return unsupported<mlx5dv_dr_action*>();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_modify_header(mlx5dv_dr_domain*, uint32_t, size_t,
                                                        __be64*) {
  return unsupported<mlx5dv_dr_action*>();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_packet_reformat(
    mlx5dv_dr_domain*, uint32_t, mlx5_ib_uapi_flow_action_packet_reformat_type, size_t, void*) {
  return unsupported<mlx5dv_dr_action*>();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_tag(uint32_t) { return unsupported<mlx5dv_dr_action*>(); }
int mlx5dv_dr_action_destroy(mlx5dv_dr_action*) { return unsupported<int>(); }
mlx5dv_dr_domain* mlx5dv_dr_domain_create(ibv_context*, mlx5dv_dr_domain_type) {
  return unsupported<mlx5dv_dr_domain*>();
}
int mlx5dv_dr_domain_destroy(mlx5dv_dr_domain*) { return unsupported<int>(); }
int mlx5dv_dr_domain_sync(mlx5dv_dr_domain*, uint32_t) { return unsupported<int>(); }
mlx5dv_dr_matcher* mlx5dv_dr_matcher_create(mlx5dv_dr_table*, uint16_t, uint8_t,
                                            mlx5dv_flow_match_parameters*) {
  return unsupported<mlx5dv_dr_matcher*>();
}
int mlx5dv_dr_matcher_destroy(mlx5dv_dr_matcher*) { return unsupported<int>(); }
mlx5dv_dr_rule* mlx5dv_dr_rule_create(mlx5dv_dr_matcher*, mlx5dv_flow_match_parameters*, size_t,
                                      mlx5dv_dr_action**) {
  return unsupported<mlx5dv_dr_rule*>();
}
int mlx5dv_dr_rule_destroy(mlx5dv_dr_rule*) { return unsupported<int>(); }
mlx5dv_dr_table* mlx5dv_dr_table_create(mlx5dv_dr_domain*, uint32_t) {
  return unsupported<mlx5dv_dr_table*>();
}
int mlx5dv_dr_table_destroy(mlx5dv_dr_table*) { return unsupported<int>(); }
mlx5dv_qp_ex* mlx5dv_qp_ex_from_ibv_qp_ex(ibv_qp_ex*) { return unsupported<mlx5dv_qp_ex*>(); }

// ---- MLX5_1.11 ------------------------------------------------------------------------
mlx5dv_devx_event_channel* mlx5dv_devx_create_event_channel(
    ibv_context*, mlx5_ib_uapi_devx_create_event_channel_flags) {
  return unsupported<mlx5dv_devx_event_channel*>();
}
void mlx5dv_devx_destroy_event_channel(mlx5dv_devx_event_channel*) { return unsupported<void>(); }
ssize_t mlx5dv_devx_get_event(mlx5dv_devx_event_channel*, mlx5_ib_uapi_devx_async_event_hdr*,
                              size_t) {
  return unsupported<ssize_t>();
}
int mlx5dv_devx_subscribe_devx_event(mlx5dv_devx_event_channel*, mlx5dv_devx_obj*, uint16_t,
                                     uint16_t*, uint64_t) {
  return unsupported<int>();
}
int mlx5dv_devx_subscribe_devx_event_fd(mlx5dv_devx_event_channel*, int, mlx5dv_devx_obj*,
                                        uint16_t) {
  return unsupported<int>();
}

// ---- MLX5_1.12 ------------------------------------------------------------------------
mlx5dv_var* mlx5dv_alloc_var(ibv_context*, uint32_t) { return unsupported<mlx5dv_var*>(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_flow_meter(mlx5dv_dr_flow_meter_attr*) {
  return unsupported<mlx5dv_dr_action*>();
}
int mlx5dv_dr_action_modify_flow_meter(mlx5dv_dr_action*, mlx5dv_dr_flow_meter_attr*, __be64) {
  return unsupported<int>();
}
int mlx5dv_dump_dr_domain(FILE*, mlx5dv_dr_domain*) { return unsupported<int>(); }
int mlx5dv_dump_dr_matcher(FILE*, mlx5dv_dr_matcher*) { return unsupported<int>(); }
int mlx5dv_dump_dr_rule(FILE*, mlx5dv_dr_rule*) { return unsupported<int>(); }
int mlx5dv_dump_dr_table(FILE*, mlx5dv_dr_table*) { return unsupported<int>(); }
void mlx5dv_free_var(mlx5dv_var*) { return unsupported<void>(); }

// ---- MLX5_1.13 ------------------------------------------------------------------------
mlx5dv_pp* mlx5dv_pp_alloc(ibv_context*, size_t, const void*, uint32_t) {
  return unsupported<mlx5dv_pp*>();
}
void mlx5dv_pp_free(mlx5dv_pp*) { return unsupported<void>(); }

// ---- MLX5_1.14 ------------------------------------------------------------------------
mlx5dv_dr_action* mlx5dv_dr_action_create_default_miss() {
  return unsupported<mlx5dv_dr_action*>();
}
void mlx5dv_dr_domain_set_reclaim_device_memory(mlx5dv_dr_domain*, bool) {
  return unsupported<void>();
}
int mlx5dv_modify_qp_lag_port(ibv_qp*, uint8_t) { return unsupported<int>(); }
int mlx5dv_query_qp_lag_port(ibv_qp*, uint8_t*, uint8_t*) { return unsupported<int>(); }

// ---- MLX5_1.15 ------------------------------------------------------------------------
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_devx_tir(mlx5dv_devx_obj*) {
  return unsupported<mlx5dv_dr_action*>();
}

// ---- MLX5_1.16 ------------------------------------------------------------------------
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_array(mlx5dv_dr_domain*, size_t,
                                                     mlx5dv_dr_action_dest_attr**) {
  return unsupported<mlx5dv_dr_action*>();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_flow_sampler(mlx5dv_dr_flow_sampler_attr*) {
  return unsupported<mlx5dv_dr_action*>();
}

// ---- MLX5_1.17 ------------------------------------------------------------------------
mlx5dv_dr_action* mlx5dv_dr_action_create_aso(mlx5dv_dr_domain*, mlx5dv_devx_obj*, uint32_t,
                                              uint32_t, uint8_t) {
  return unsupported<mlx5dv_dr_action*>();
}
mlx5dv_dr_action* mlx5dv_dr_action_create_pop_vlan() { return unsupported<mlx5dv_dr_action*>(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_push_vlan(mlx5dv_dr_domain*, __be32) {
  return unsupported<mlx5dv_dr_action*>();
}
int mlx5dv_dr_action_modify_aso(mlx5dv_dr_action*, uint32_t, uint32_t, uint8_t) {
  return unsupported<int>();
}
int mlx5dv_modify_qp_sched_elem(ibv_qp*, const mlx5dv_sched_leaf*, const mlx5dv_sched_leaf*) {
  return unsupported<int>();
}
int mlx5dv_modify_qp_udp_sport(ibv_qp*, uint16_t) { return unsupported<int>(); }
mlx5dv_sched_leaf* mlx5dv_sched_leaf_create(ibv_context*, const mlx5dv_sched_attr*) {
  return unsupported<mlx5dv_sched_leaf*>();
}
int mlx5dv_sched_leaf_destroy(mlx5dv_sched_leaf*) { return unsupported<int>(); }
int mlx5dv_sched_leaf_modify(mlx5dv_sched_leaf*, const mlx5dv_sched_attr*) {
  return unsupported<int>();
}
mlx5dv_sched_node* mlx5dv_sched_node_create(ibv_context*, const mlx5dv_sched_attr*) {
  return unsupported<mlx5dv_sched_node*>();
}
int mlx5dv_sched_node_destroy(mlx5dv_sched_node*) { return unsupported<int>(); }
int mlx5dv_sched_node_modify(mlx5dv_sched_node*, const mlx5dv_sched_attr*) {
  return unsupported<int>();
}

// ---- MLX5_1.18 ------------------------------------------------------------------------
int mlx5dv_reserved_qpn_alloc(ibv_context*, uint32_t*) { return unsupported<int>(); }
int mlx5dv_reserved_qpn_dealloc(ibv_context*, uint32_t) { return unsupported<int>(); }

// ---- MLX5_1.19 ------------------------------------------------------------------------
int _mlx5dv_query_port(ibv_context*, uint32_t, mlx5_ib_uapi_query_port*, size_t) {
  return unsupported<int>();
}
mlx5dv_devx_umem* mlx5dv_devx_umem_reg_ex(ibv_context*, mlx5dv_devx_umem_in*) {
  return unsupported<mlx5dv_devx_umem*>();
}
void* mlx5dv_dm_map_op_addr(ibv_dm*, uint8_t) { return unsupported<void*>(); }

// ---- MLX5_1.20 ------------------------------------------------------------------------
int _mlx5dv_mkey_check(mlx5dv_mkey*, mlx5dv_mkey_err*, size_t) { return unsupported<int>(); }
void mlx5dv_dr_domain_allow_duplicate_rules(mlx5dv_dr_domain*, bool) { return unsupported<void>(); }
int mlx5dv_map_ah_to_qp(ibv_ah*, uint32_t) { return unsupported<int>(); }
int mlx5dv_qp_cancel_posted_send_wrs(mlx5dv_qp_ex*, uint64_t) { return unsupported<int>(); }

// ---- MLX5_1.21 ------------------------------------------------------------------------
int mlx5dv_crypto_login(ibv_context*, mlx5dv_crypto_login_attr*) { return unsupported<int>(); }
int mlx5dv_crypto_login_query_state(ibv_context*, mlx5dv_crypto_login_state*) {
  return unsupported<int>();
}
int mlx5dv_crypto_logout(ibv_context*) { return unsupported<int>(); }
int mlx5dv_dci_stream_id_reset(ibv_qp*, uint16_t) { return unsupported<int>(); }
mlx5dv_dek* mlx5dv_dek_create(ibv_context*, mlx5dv_dek_init_attr*) {
  return unsupported<mlx5dv_dek*>();
}
int mlx5dv_dek_destroy(mlx5dv_dek*) { return unsupported<int>(); }
int mlx5dv_dek_query(mlx5dv_dek*, mlx5dv_dek_attr*) { return unsupported<int>(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_ib_port(mlx5dv_dr_domain*, uint32_t) {
  return unsupported<mlx5dv_dr_action*>();
}
int mlx5dv_dr_matcher_set_layout(mlx5dv_dr_matcher*, mlx5dv_dr_matcher_layout*) {
  return unsupported<int>();
}
ibv_device** mlx5dv_get_vfio_device_list(mlx5dv_vfio_context_attr*) {
  return unsupported<ibv_device**>();
}
int mlx5dv_vfio_get_events_fd(ibv_context*) {
  // Returns a file descriptor: fails as open(2) does, not with a positive errno.
  errno = EOPNOTSUPP;
  return -1;
}
int mlx5dv_vfio_process_events(ibv_context*) { return unsupported<int>(); }

// ---- MLX5_1.22 ------------------------------------------------------------------------
int mlx5dv_dr_aso_other_domain_link(mlx5dv_devx_obj*, mlx5dv_dr_domain*, mlx5dv_dr_domain*,
                                    uint32_t, uint8_t) {
  return unsupported<int>();
}
int mlx5dv_dr_aso_other_domain_unlink(mlx5dv_devx_obj*, mlx5dv_dr_domain*) {
  return unsupported<int>();
}

// ---- MLX5_1.23 ------------------------------------------------------------------------
mlx5dv_devx_msi_vector* mlx5dv_devx_alloc_msi_vector(ibv_context*) {
  return unsupported<mlx5dv_devx_msi_vector*>();
}
mlx5dv_devx_eq* mlx5dv_devx_create_eq(ibv_context*, const void*, size_t, void*, size_t) {
  return unsupported<mlx5dv_devx_eq*>();
}
int mlx5dv_devx_destroy_eq(mlx5dv_devx_eq*) { return unsupported<int>(); }
int mlx5dv_devx_free_msi_vector(mlx5dv_devx_msi_vector*) { return unsupported<int>(); }

// ---- MLX5_1.24 ------------------------------------------------------------------------
mlx5dv_steering_anchor* mlx5dv_create_steering_anchor(ibv_context*, mlx5dv_steering_anchor_attr*) {
  return unsupported<mlx5dv_steering_anchor*>();
}
mlx5dv_crypto_login_obj* mlx5dv_crypto_login_create(ibv_context*, mlx5dv_crypto_login_attr_ex*) {
  return unsupported<mlx5dv_crypto_login_obj*>();
}
int mlx5dv_crypto_login_destroy(mlx5dv_crypto_login_obj*) { return unsupported<int>(); }
int mlx5dv_crypto_login_query(mlx5dv_crypto_login_obj*, mlx5dv_crypto_login_query_attr*) {
  return unsupported<int>();
}
int mlx5dv_destroy_steering_anchor(mlx5dv_steering_anchor*) { return unsupported<int>(); }
mlx5dv_dr_action* mlx5dv_dr_action_create_dest_root_table(mlx5dv_dr_table*, uint16_t) {
  return unsupported<mlx5dv_dr_action*>();
}

}  // extern "C"
