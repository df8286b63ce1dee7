#include "server/handlers/handler.h"

#include "server/shard_loop.h"

namespace ringkv {

void Handler::Submit(Request& request) {
  request.tag = this;
  loop_.Submit(&request);
}

}  // namespace ringkv
