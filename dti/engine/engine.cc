// The engine side of the DTI: serves application regions over a Transport.
// The engine's parts are in the files engine_impl.h lists; here: the poll
// loop that drives them, and Engine::create.
#include "engine_impl.h"

namespace dti::engine::detail {
namespace {

unsigned EngineImpl::poll()
{
    stats_.polls++;
    unsigned work = 0;
    for (size_t i = 0; i < groups_.size(); i++) {
        Group *group = groups_[i].get();
        if (group && group->dying) {
            maybe_finish(*group);
            continue;
        }
        if (!group || group->broken)
            continue;
        for (size_t k = 0; k < group->live_ctxs.size() && !group->broken; k++) {
            const uint16_t ci = group->live_ctxs[k];
            if (command_waiting(*group, group->ctxs[ci])) // else process_ctx() would find nothing
                process_ctx(*group, ci, &work);
        }
    }
    transport_events(&work);
    // Nothing marked dirty and nothing to publish since the last pass: the
    // pass below would find every list empty.
    if (!table_work_)
        return work;
    table_work_ = false;
    for (size_t i = 0; i < groups_.size(); i++) {
        Group *group = groups_[i].get();
        if (!group || !group->base) {
            if (group && (!group->dirty.empty() || !group->to_publish.empty()))
                table_work_ = true; // kept for a later pass, as before
            continue;
        }
        for (size_t k = 0; k < group->dirty.size(); k++) {
            uint32_t si = group->dirty[k];
            group->slots[si].dirty = false;
            if (!group->broken && !group->dying) {
                refresh(*group, si);
                notify(*group, si);
            }
        }
        group->dirty.clear();
        if (!group->broken && !group->dying)
            publish(*group);
    }
    return work;
}

} // namespace
} // namespace dti::engine::detail

namespace dti::engine {

std::unique_ptr<Engine> Engine::create(Transport &transport, const Limits &limits, std::string *error)
{
    detail::Geometry g;
    if (!detail::geometry(limits, &g)) {
        if (error)
            *error = "unusable DTI limits: each queue and ring size must be a power of two, "
                     "evq_entries >= 2 * cmdq_entries, 1..64 contexts, 1..1048575 sockets";
        return nullptr;
    }
    if (limits.commands_per_poll == 0) {
        if (error)
            *error = "commands_per_poll must be positive";
        return nullptr;
    }
    return std::make_unique<detail::EngineImpl>(transport, limits);
}

} // namespace dti::engine
