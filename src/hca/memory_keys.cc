#include "hca/memory_keys.h"

namespace softhca::hca {

uint32_t MemoryKeys::create(const hwif::CreateMkeyIn& in, uint32_t owner) {
  Mkey* m = nullptr;
  const uint32_t index = table_.insert(owner, &m);
  if (index == 0) return 0;
  m->pdn = in.pdn;
  m->access = in.access;
  m->host_addr = in.host_addr;
  m->iova = in.iova;
  m->length = in.length;
  ++st_.variant;
  m->key = (index << 8) | st_.variant;
  return m->key;
}

bool MemoryKeys::destroy(uint32_t key) {
  const Mkey* m = find(key);
  return m != nullptr && table_.erase(index_of(key));
}

const Mkey* MemoryKeys::find(uint32_t key) const {
  const Mkey* m = table_.find(index_of(key));
  return (m != nullptr && m->key == key) ? m : nullptr;
}

uint32_t MemoryKeys::count_for_pd(uint32_t pdn) const {
  uint32_t n = 0;
  table_.for_each([&](uint32_t, const Mkey& m) { n += (m.pdn == pdn) ? 1 : 0; });
  return n;
}

void MemoryKeys::destroy_owned(uint32_t owner) {
  table_.for_each_of(owner, [&](uint32_t index) { table_.erase(index); });
}

}  // namespace softhca::hca
