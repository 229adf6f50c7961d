def watch(layer, store):
    def hook(module, grad_input, grad_output):
        store.append(grad_output[0])
    return layer.register_full_backward_hook(hook)
