// Groups and members by id (table.h): the ids the transport's user words
// and the public attachment ids name.
#include "table.h"

#include <string>

namespace dti::engine::detail {

Group *Table::new_group(std::string *why, int *err)
{
    size_t live = 0;
    for (auto &m : members_)
        live += m != nullptr;
    if (live >= lim_.max_attachments) {
        *why = "attachment limit reached (" + std::to_string(lim_.max_attachments) + ")";
        *err = DTI_E_LIMIT;
        return nullptr;
    }
    Geometry g;
    if (!geometry(lim_, &g) || g.committed > lim_.max_region_bytes) {
        *why = "region of " + std::to_string(g.committed) + " bytes exceeds the memory limit per application";
        *err = DTI_E_LIMIT;
        return nullptr;
    }
    size_t id = 0;
    while (id < groups_.size() && groups_[id])
        id++;
    if (id == groups_.size())
        groups_.emplace_back();
    if (id > 0xffff) {
        *why = "attachment ids exhausted";
        *err = DTI_E_LIMIT;
        return nullptr;
    }
    groups_[id] = std::make_unique<Group>();
    Group &group = *groups_[id];
    group.id = int(id);
    group.epoch = next_epoch_++;
    if (next_epoch_ == 0)
        next_epoch_ = 1;
    group.lim = lim_;
    group.geo = g;
    group.size = g.size;
    return &group;
}

// A process of `group`; counts against max_attachments (one connection each).
Member *Table::new_member(Group &group, int fd, std::string *why, int *err)
{
    size_t id = 0, live = 0;
    for (auto &m : members_)
        live += m != nullptr;
    if (live >= lim_.max_attachments) {
        *why = "attachment limit reached (" + std::to_string(lim_.max_attachments) + ")";
        *err = DTI_E_LIMIT;
        return nullptr;
    }
    while (id < members_.size() && members_[id])
        id++;
    if (id == members_.size())
        members_.emplace_back();
    members_[id] = std::make_unique<Member>();
    Member &m = *members_[id];
    m.id = int(id);
    m.fd = fd;
    m.group = group.id;
    m.holds.assign(group.lim.max_sockets, false);
    group.members++;
    return &m;
}
} // namespace dti::engine::detail
