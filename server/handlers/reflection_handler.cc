// grpc.reflection's ServerReflectionInfo, v1alpha and v1 (the same messages under two package
// names; one template serves both). Each request is answered, in order, from the descriptors
// compiled into the binary (protobuf's generated pool): the services of the method table, and
// the files that define a symbol, with those of their dependencies this stream has not sent
// yet. A file is sent as protoc wrote it with its comments (proto/descriptor_set.h) where the
// binary has that copy, so that grpcurl's `describe` shows them.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "grpc/reflection/v1/reflection.pb.h"
#include "grpc/reflection/v1alpha/reflection.pb.h"
#include "proto/descriptor_set.h"
#include "server/handlers/internal/bidi_handler.h"
#include "server/handlers/internal/factories.h"
#include "server/handlers/methods.h"

namespace ringkv::internal {
namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// File name -> its FileDescriptorProto with source info, serialized; built once.
const absl::flat_hash_map<std::string, std::string>& FilesWithComments() {
  static const auto* files = [] {
    auto* map = new absl::flat_hash_map<std::string, std::string>();
    google::protobuf::FileDescriptorSet set;
    if (set.ParseFromArray(SourceDescriptorSet().data(),
                           static_cast<int>(SourceDescriptorSet().size()))) {
      for (const auto& file : set.file()) (*map)[file.name()] = file.SerializeAsString();
    }
    return map;
  }();
  return *files;
}

template <typename RequestPb, typename ResponsePb>
class ReflectionHandler : public BidiHandler<ResponsePb> {
 public:
  using BidiHandler<ResponsePb>::BidiHandler;

  google::protobuf::MessageLite* incoming() override { return &request_; }

 private:
  void TakeMessage() override { this->replies_.push_back(Answer(request_)); }

  ResponsePb Answer(const RequestPb& request) {
    ResponsePb response;
    response.set_valid_host(request.host());
    *response.mutable_original_request() = request;
    const DescriptorPool* pool = DescriptorPool::generated_pool();
    switch (request.message_request_case()) {
      case RequestPb::kListServices:
        for (std::string_view name : ServiceNames()) {
          response.mutable_list_services_response()->add_service()->set_name(std::string(name));
        }
        break;
      case RequestPb::kFileByFilename:
        AddFile(pool->FindFileByName(request.file_by_filename()), "file",
                request.file_by_filename(), &response);
        break;
      case RequestPb::kFileContainingSymbol:
        AddFile(pool->FindFileContainingSymbol(request.file_containing_symbol()), "symbol",
                request.file_containing_symbol(), &response);
        break;
      case RequestPb::kFileContainingExtension: {
        const auto& ext = request.file_containing_extension();
        const auto* type = pool->FindMessageTypeByName(ext.containing_type());
        const auto* field =
            type == nullptr ? nullptr : pool->FindExtensionByNumber(type, ext.extension_number());
        AddFile(field == nullptr ? nullptr : field->file(), "extension",
                absl::StrCat(ext.containing_type(), " ", ext.extension_number()), &response);
        break;
      }
      case RequestPb::kAllExtensionNumbersOfType: {
        const auto* type = pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
        if (type == nullptr) {
          SetError(&response, absl::StatusCode::kNotFound,
                   absl::StrCat("type not found: ", request.all_extension_numbers_of_type()));
          break;
        }
        std::vector<const google::protobuf::FieldDescriptor*> extensions;
        pool->FindAllExtensions(type, &extensions);
        auto* numbers = response.mutable_all_extension_numbers_response();
        numbers->set_base_type_name(type->full_name());
        for (const auto* field : extensions) numbers->add_extension_number(field->number());
        break;
      }
      default:
        SetError(&response, absl::StatusCode::kUnimplemented,
                 "the request names no known reflection query");
    }
    return response;
  }

  // `file` and those of its dependencies this stream has not sent, or NOT_FOUND.
  void AddFile(const FileDescriptor* file, std::string_view what, std::string_view name,
               ResponsePb* response) {
    if (file == nullptr) {
      SetError(response, absl::StatusCode::kNotFound,
               absl::StrCat(std::string(what), " not found: ", std::string(name)));
      return;
    }
    auto* files = response->mutable_file_descriptor_response();
    std::vector<const FileDescriptor*> todo = {file};
    bool first = true;
    while (!todo.empty()) {
      const FileDescriptor* f = todo.back();
      todo.pop_back();
      // The file asked for is always sent; dependencies only once per stream.
      if (!sent_.insert(f->name()).second && !first) continue;
      first = false;
      if (auto it = FilesWithComments().find(f->name()); it != FilesWithComments().end()) {
        files->add_file_descriptor_proto(it->second);
      } else {
        google::protobuf::FileDescriptorProto proto;
        f->CopyTo(&proto);
        files->add_file_descriptor_proto(proto.SerializeAsString());
      }
      for (int i = 0; i < f->dependency_count(); ++i) todo.push_back(f->dependency(i));
    }
  }

  static void SetError(ResponsePb* response, absl::StatusCode code, std::string message) {
    auto* error = response->mutable_error_response();
    error->set_error_code(static_cast<int>(code));
    error->set_error_message(std::move(message));
  }

  RequestPb request_;
  absl::flat_hash_set<std::string> sent_;  // Files this stream has sent.
};

}  // namespace

std::unique_ptr<Handler> MakeReflectionV1alphaHandler(HandlerHost& host, CallSink& sink) {
  namespace pb = ::grpc::reflection::v1alpha;
  return std::make_unique<
      ReflectionHandler<pb::ServerReflectionRequest, pb::ServerReflectionResponse>>(host, sink);
}
std::unique_ptr<Handler> MakeReflectionV1Handler(HandlerHost& host, CallSink& sink) {
  namespace pb = ::grpc::reflection::v1;
  return std::make_unique<
      ReflectionHandler<pb::ServerReflectionRequest, pb::ServerReflectionResponse>>(host, sink);
}

}  // namespace ringkv::internal
